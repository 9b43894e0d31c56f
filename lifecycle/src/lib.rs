//! lifecycle: sandbox creation, quarantine and teardown through the stack's sockproxy.
//! Not implemented yet (issue 4); the crate exists so the workspace layout is final.
