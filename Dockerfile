# Build stage: the same toolchain the project is tested with.
FROM rust:1.95-bookworm AS build
WORKDIR /src
# Dependencies first, so a source change does not rebuild them all. The
# workspace's own crates (crates/: the protobuf reader) come with them: the
# manifest names them, and they change less often than src/.
COPY Cargo.toml Cargo.lock rustfmt.toml ./
COPY crates ./crates
RUN mkdir src && echo 'fn main() {}' > src/main.rs && cargo build --release --locked && rm -rf src
COPY src ./src
RUN touch src/main.rs && cargo build --release --locked

# Runtime stage: glibc and nothing else (rustls needs no OpenSSL, and the
# in-cluster CA comes from the service account), running as a non-root user.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/demo-controller /usr/local/bin/demo-controller
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/demo-controller"]
