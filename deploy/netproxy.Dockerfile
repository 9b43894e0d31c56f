# The restricted-mode egress sidecar: a static netproxy and nothing else.
# Two routes to the same image:
#   docker build -f deploy/netproxy.Dockerfile -t netproxy:latest .    # builds inside (pulls rust:1-bookworm)
#   deploy/build-images.sh                                      # offline: builds on the host, then
#                                                               # only the last stage, FROM scratch
# Everything the image needs comes out of the build stage under /out.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN arch="$(uname -m)-unknown-linux-gnu" \
 && RUSTFLAGS="-C target-feature=+crt-static" CARGO_PROFILE_RELEASE_DEBUG=false \
    CARGO_PROFILE_RELEASE_STRIP=symbols cargo build --locked --release -p netproxy --target "$arch" \
 && mkdir -p /out/empty && cp "target/$arch/release/netproxy" /out/netproxy

FROM scratch
ARG VERSION=0.1.0
ARG SOURCE=unknown
LABEL org.opencontainers.image.title="netproxy" \
      org.opencontainers.image.description="Egress allowlist sidecar for restricted-mode sandboxes" \
      org.opencontainers.image.version="$VERSION" \
      org.opencontainers.image.source="$SOURCE" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/netproxy /netproxy
USER 65534:65534
EXPOSE 3128
ENTRYPOINT ["/netproxy"]
CMD ["--listen", "0.0.0.0:3128"]
