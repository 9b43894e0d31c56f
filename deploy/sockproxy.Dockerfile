# sockproxy: a static binary and nothing else. It runs as nobody and needs the engine socket's
# group to reach dockerd, e.g.
#   docker run --group-add "$(stat -c %g /var/run/docker.sock)" -v /var/run/docker.sock:/var/run/docker.sock …
# /run/sockproxy is its own, so a volume mounted there can hold the stack's socket, and so is
# /var/lib/sockproxy, for --state-dir.
# Two routes to the same image:
#   docker build -f deploy/sockproxy.Dockerfile -t sockproxy:latest .    # builds inside (pulls rust:1-bookworm)
#   deploy/build-images.sh                                      # offline: builds on the host, then
#                                                               # only the last stage, FROM scratch
# Everything the image needs comes out of the build stage under /out.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN arch="$(uname -m)-unknown-linux-gnu" \
 && RUSTFLAGS="-C target-feature=+crt-static" CARGO_PROFILE_RELEASE_DEBUG=false \
    CARGO_PROFILE_RELEASE_STRIP=symbols cargo build --locked --release -p sockproxy --target "$arch" \
 && mkdir -p /out/empty && cp "target/$arch/release/sockproxy" /out/sockproxy

FROM scratch
ARG VERSION=0.1.0
ARG SOURCE=unknown
LABEL org.opencontainers.image.title="sockproxy" \
      org.opencontainers.image.description="Docker Engine API proxy for one sandbox stack" \
      org.opencontainers.image.version="$VERSION" \
      org.opencontainers.image.source="$SOURCE" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/sockproxy /sockproxy
COPY --from=build --chown=65534:65534 /out/empty /run/sockproxy
# The proxy's own state (--state-dir), for a volume of its own that no other service mounts.
COPY --from=build --chown=65534:65534 /out/empty /var/lib/sockproxy
USER 65534:65534
ENTRYPOINT ["/sockproxy"]
CMD ["--listen", "/run/sockproxy/docker.sock"]
