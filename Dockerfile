# For those who build images with Docker (the tests here import images built
# from host binaries instead: e2e/stack/image.sh). Two targets:
#   docker build --target flashsale -t docker.io/flashsale/flashsale:0.1.0 .
#   docker build --target operator  -t docker.io/flashsale/operator:0.1.0 .
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bins \
 && strip target/release/flashsale target/release/flashsale-operator

FROM gcr.io/distroless/cc-debian12:nonroot AS flashsale
COPY --from=build /src/target/release/flashsale /usr/local/bin/flashsale
USER 65534
ENTRYPOINT ["/usr/local/bin/flashsale"]

FROM gcr.io/distroless/cc-debian12:nonroot AS operator
COPY --from=build /src/target/release/flashsale-operator /usr/local/bin/flashsale-operator
USER 65534
ENTRYPOINT ["/usr/local/bin/flashsale-operator"]
