//! Shared test support (harness, engines). Filled in by the integration tests.
