//! The repository's own tools, kept from rotting: the benchmark run end to end at a tiny size
//! (`bench_smoke`), the chaos soak run short with its counts asserted (`chaos_smoke`), every
//! fuzz corpus file replayed through its property on stable (`fuzz_corpus`), every flag of every binary given a `--help` text (`help`), the generated
//! flag references in `docs/reference/` (`reference`), and the documentation's shape (`docs`).
//! Run on its own with `cargo test -p sockproxy-tests --test tools`.

mod bench_smoke;
mod chaos_smoke;
mod docs;
mod fuzz_corpus;
mod help;
mod reference;
