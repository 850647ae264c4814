# syntax=docker/dockerfile:1
#
# FerroLB images: one static build of both binaries, two minimal runtime images.
#
#   docker build --target controller -t ghcr.io/ferrolb/ferrolb-controller:0.1.0 .
#   docker build --target speaker    -t ghcr.io/ferrolb/ferrolb-speaker:0.1.0 .
#
# The tag is the workspace version, which is also the chart's appVersion (the chart's default tag).
#
# Without a container engine or a registry, `scripts/images` builds the same two images FROM
# scratch with buildah and writes them as OCI archives (target/images/*.oci.tar): both binaries,
# statically linked, at the same paths, the files of the distroless base, the same USER,
# ENTRYPOINT, EXPOSEd ports, environment and working directory. Change both together:
# tests/tests/images.rs reads this file and checks the archives against its two runtime stages.

ARG RUST_VERSION=1.95

# --- build: Alpine's Rust targets musl, which links statically by default ----------------------
FROM rust:${RUST_VERSION}-alpine AS build
RUN apk add --no-cache musl-dev binutils
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin ferrolb-controller --bin ferrolb-speaker \
 && mkdir -p /out \
 && cp target/release/ferrolb-controller target/release/ferrolb-speaker /out/ \
 && for bin in /out/*; do \
      if readelf -d "$bin" | grep -q NEEDED; then echo "$bin is not static" >&2; exit 1; fi; \
    done

# --- controller: no shell, no package manager, uid 65532 ----------------------------------------
FROM gcr.io/distroless/static-debian12:nonroot AS controller
COPY --from=build /out/ferrolb-controller /usr/local/bin/ferrolb-controller
USER 65532:65532
EXPOSE 7472
ENTRYPOINT ["/usr/local/bin/ferrolb-controller"]

# --- speaker: same base; the chart runs it as uid 0 with every capability dropped except
# NET_RAW and NET_ADMIN (added capabilities are only effective for uid 0).
FROM gcr.io/distroless/static-debian12:nonroot AS speaker
COPY --from=build /out/ferrolb-speaker /usr/local/bin/ferrolb-speaker
USER 65532:65532
EXPOSE 7473 7946/udp
ENTRYPOINT ["/usr/local/bin/ferrolb-speaker"]
