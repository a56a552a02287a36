#!/usr/bin/env bash
# Certificates for the TLS example (deploy/compose/tls.yml): a throwaway CA, one certificate
# for the internal gRPC hops (shards, assignors, the gateways' calls), one for the gateways'
# Kafka listener and one client certificate for your Kafka clients.
#
#   deploy/compose/make-certs.sh [DIR]     # default: deploy/compose/certs
#
# Run it again to rotate: the CA is kept, the other certificates are re-issued, and the
# running processes use the new ones for new connections (no restart; docs/security.md).
# For trying TLS out only: the keys are world-readable so that the containers' user can
# read them from a bind mount.
set -euo pipefail

dir="${1:-$(dirname "$0")/certs}"
days="${CERT_DAYS:-30}"
mkdir -p "$dir"
cd "$dir"

if [[ ! -f ca.crt || ! -f ca.key ]]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout ca.key -out ca.crt -days 365 -subj "/O=groupcoord example/CN=groupcoord example CA" \
    2>/dev/null
fi

# issue NAME SUBJECT SANS
issue() {
  local name="$1" subject="$2" sans="$3"
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$name.key.new" -out "$name.csr" -subj "$subject" 2>/dev/null
  printf '%s\n' \
    "basicConstraints=critical,CA:FALSE" \
    "keyUsage=critical,digitalSignature,keyEncipherment" \
    "extendedKeyUsage=serverAuth,clientAuth" \
    "subjectAltName=$sans" >"$name.ext"
  openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial \
    -out "$name.crt.new" -days "$days" -extfile "$name.ext" 2>/dev/null
  chmod 644 "$name.key.new" "$name.crt.new"
  # key first, then the certificate: the processes keep the old pair until both are new
  mv "$name.key.new" "$name.key"
  mv "$name.crt.new" "$name.crt"
  rm -f "$name.csr" "$name.ext"
}

issue internal "/O=groupcoord example/OU=groupcoord/CN=groupcoord" \
  "DNS:shard-0,DNS:shard-1,DNS:shard-2,DNS:assignor-1,DNS:assignor-2,DNS:localhost,IP:127.0.0.1"
issue gateway "/O=groupcoord example/CN=gateway" "DNS:localhost,DNS:gateway-1,DNS:gateway-2,IP:127.0.0.1"
issue client "/O=groupcoord example/OU=apps/CN=app" "DNS:app"
chmod 644 ca.crt
echo "certificates in $PWD: ca.crt, internal.{crt,key}, gateway.{crt,key}, client.{crt,key}"
