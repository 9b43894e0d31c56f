# lifecycle: a static binary and nothing else. It talks only to the stack's sockproxy socket;
# /state (the quarantine ledger) is its own, so a volume mounted there is writable.
FROM scratch
COPY lifecycle /lifecycle
COPY --chown=65534:65534 empty /state
USER 65534:65534
ENV LIFECYCLE_STATE_DIR=/state
ENTRYPOINT ["/lifecycle"]
