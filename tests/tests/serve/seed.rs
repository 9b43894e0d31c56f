//! Behaviours of deer-flow's provider tests (seed `004_…`) that `lifecycle serve` has, each as a
//! test named after the seed's, through the HTTP API against the fake engine behind sockproxy.
