#!/bin/bash
# libard_client.so exports only the C API (ard_*) and needs nothing beyond libc/libstdc++/libm/
# libgcc_s/the loader/pthread: no protobuf, gRPC, Abseil or spdlog may leak into TensorFlow's process.
set -euo pipefail
lib="client/libard_client.so"
[[ -f "$lib" ]] || { echo "missing $lib"; exit 1; }

exports=$(nm -D --defined-only "$lib" | awk '{print $NF}')
bad=$(grep -v '^ard_' <<<"$exports" || true)
if [[ -n "$bad" ]]; then
  echo "non-API symbols exported:"; echo "$bad"; exit 1
fi
for sym in ard_options_init ard_client_create ard_client_job ard_client_topology ard_request_init \
    ard_submit ard_wait ard_release ard_client_destroy ard_code_name ard_gpu_probe \
    ard_constants; do
  grep -qx "$sym" <<<"$exports" || { echo "missing export $sym"; exit 1; }
done

needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
for n in $needed; do
  case "$n" in
    libc.so.6|libstdc++.so.6|libm.so.6|libgcc_s.so.1|ld-linux-x86-64.so.2|libpthread.so.0) ;;
    *) echo "unexpected NEEDED entry: $n"; exit 1 ;;
  esac
done
if nm -D "$lib" | grep -Eiq 'protobuf|grpc|absl|spdlog'; then
  echo "references to protobuf/gRPC/Abseil/spdlog symbols"; exit 1
fi
echo "exports: $(wc -l <<<"$exports") ard_* symbols; NEEDED: $needed"
