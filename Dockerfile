# gpud's container image, for users with Docker:
#
#   docker build --build-arg VERSION=0.1.0 -t ghcr.io/gpud/gpud:0.1.0 .
#
# `make image` builds the same image without a container engine
# (hack/image: an OCI layout and a `docker load` tarball); the Helm chart
# deploys ghcr.io/gpud/gpud:<its appVersion>. hack/image's test keeps the
# entrypoint, command and binary path here equal to its own.
ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
# go-nvml is cgo: it dlopens the driver's libnvidia-ml.so.1 at run time, so
# the binary links glibc and nothing of NVIDIA's.
RUN CGO_ENABLED=1 CGO_CFLAGS="-O2 -Wno-deprecated-declarations" \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/gpud ./cmd/gpud

# distroless/base: glibc (libc, and the libm, libdl, libpthread, librt that
# libnvidia-ml.so.1 links) and CA certificates; no shell, no package
# manager. The NVIDIA container runtime injects the driver's libraries and
# device nodes.
FROM gcr.io/distroless/base-debian12
ARG VERSION=dev
LABEL org.opencontainers.image.title="gpud" \
      org.opencontainers.image.description="gpud: node GPU agent (device plugin or DRA driver, MIG, sharing, health, DCGM-compatible metrics)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://github.com/gpud/gpud" \
      org.opencontainers.image.url="https://github.com/gpud/gpud"
COPY --from=build /out/gpud /usr/local/bin/gpud
# Root: the agent opens /dev/nvidia*, the kubelet's sockets and the host's
# /proc (its DaemonSet runs it privileged).
USER 0:0
ENTRYPOINT ["/usr/local/bin/gpud"]
CMD ["agent"]
