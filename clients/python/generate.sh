#!/bin/sh
# Generates the Python message and gRPC stub modules for session-ledger from proto/ with
# Debian's protoc and grpc_python_plugin (packages protobuf-compiler, protobuf-compiler-grpc).
# Output: $OUT (default: clients/python/gen). The modules import each other as `ledger.v1...`,
# `buf.validate...` and `google.rpc...`, so put $OUT on sys.path (example.py does).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${OUT:-"$HERE/gen"}
PROTOC=${PROTOC:-protoc}
PLUGIN=${GRPC_PYTHON_PLUGIN:-$(command -v grpc_python_plugin || true)}

if ! command -v "$PROTOC" >/dev/null 2>&1; then
  echo "generate.sh: protoc not found (apt-get install protobuf-compiler)" >&2
  exit 1
fi
if [ -z "$PLUGIN" ] || [ ! -x "$PLUGIN" ]; then
  echo "generate.sh: grpc_python_plugin not found (apt-get install protobuf-compiler-grpc)" >&2
  exit 1
fi

mkdir -p "$OUT"
cd "$ROOT"
"$PROTOC" -I proto -I proto-vendor -I /usr/include \
  --python_out="$OUT" \
  --grpc_python_out="$OUT" \
  --plugin=protoc-gen-grpc_python="$PLUGIN" \
  proto/ledger/v1/*.proto \
  proto-vendor/buf/validate/validate.proto \
  proto-vendor/google/rpc/*.proto

# protoc writes no __init__.py files. `google` must stay a namespace package (google.protobuf is
# installed elsewhere), but google/rpc gets one so these modules win over any other copy;
# ledger/ and buf/ get one too.
for d in ledger ledger/v1 buf buf/validate google/rpc; do
  if [ -d "$OUT/$d" ]; then : >"$OUT/$d/__init__.py"; fi
done
echo "generated Python modules in $OUT"
