//! What `deploy/` ships, as its tools read it: the compose example brought up with
//! docker-compose on the real engine (`compose`) and the systemd unit as `systemd-analyze verify`
//! reads it (`systemd`); the images as `docker build` makes them (`images`). Run on its own with `cargo test -p sockproxy-tests --test deploy`.

mod activation;
mod compose;
mod images;
mod systemd;
