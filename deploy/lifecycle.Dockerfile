# lifecycle: a static binary and nothing else. It talks only to the stack's sockproxy socket;
# /state (the quarantine ledger) is its own, so a volume mounted there is writable.
# Two routes to the same image:
#   docker build -f deploy/lifecycle.Dockerfile -t lifecycle:latest .    # builds inside (pulls rust:1-bookworm)
#   deploy/build-images.sh                                      # offline: builds on the host, then
#                                                               # only the last stage, FROM scratch
# Everything the image needs comes out of the build stage under /out.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN arch="$(uname -m)-unknown-linux-gnu" \
 && RUSTFLAGS="-C target-feature=+crt-static" CARGO_PROFILE_RELEASE_DEBUG=false \
    CARGO_PROFILE_RELEASE_STRIP=symbols cargo build --locked --release -p lifecycle --target "$arch" \
 && mkdir -p /out/empty && cp "target/$arch/release/lifecycle" /out/lifecycle

FROM scratch
ARG VERSION=0.1.0
ARG SOURCE=unknown
LABEL org.opencontainers.image.title="lifecycle" \
      org.opencontainers.image.description="Sandbox container lifecycle and provider for one stack" \
      org.opencontainers.image.version="$VERSION" \
      org.opencontainers.image.source="$SOURCE" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/lifecycle /lifecycle
COPY --from=build --chown=65534:65534 /out/empty /state
USER 65534:65534
ENV LIFECYCLE_STATE_DIR=/state
ENTRYPOINT ["/lifecycle"]
