# The restricted-mode egress sidecar: a static netproxy and nothing else. No base image is
# pulled (none can be here, and none is needed). Build it with deploy/build-netproxy-image.sh.
FROM scratch
COPY netproxy /netproxy
USER 65534:65534
EXPOSE 3128
ENTRYPOINT ["/netproxy"]
CMD ["--listen", "0.0.0.0:3128"]
