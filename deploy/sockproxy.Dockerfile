# sockproxy: a static binary and nothing else (no base image is pulled). It runs as nobody and
# needs the engine socket's group to reach dockerd, e.g.
#   docker run --group-add "$(stat -c %g /var/run/docker.sock)" -v /var/run/docker.sock:/var/run/docker.sock …
# /run/sockproxy is its own, so a volume mounted there can hold the stack's socket.
FROM scratch
COPY sockproxy /sockproxy
COPY --chown=65534:65534 empty /run/sockproxy
USER 65534:65534
ENTRYPOINT ["/sockproxy"]
CMD ["--listen", "/run/sockproxy/docker.sock"]
