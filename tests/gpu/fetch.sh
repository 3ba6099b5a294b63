#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# tests/gpu/fetch.sh: run on a Debian 12 development machine (with network)
# BEFORE a GPU run. Fills build-gpu-debs/ (ignored by git; pass it to the
# device tool as a carried path) with what tests/gpu/run.sh needs there:
#   *.deb       ZeroMQ, msgpack-c, hwloc, liburing, PCRE2, libsystemd (-dev and
#               runtime) and pkgconf, fetched with `apt-get download`
#   fallback/   krb5 GSSAPI and libudev, used only when the GPU host lacks them
#   refdata/    stories260K.gguf and its published greedy output, and the F32
#               models of refdata/arch with their prompts, logits and greedy ids
#               (../shared is not carried to the GPU host; about 21 MB)
set -euo pipefail
cd "$(dirname "$0")/../.."
D=build-gpu-debs
mkdir -p "$D/fallback" "$D/refdata/expected" "$D/refdata/arch"
PKGS=(libzmq3-dev libzmq5 libsodium23 libpgm-5.3-0 libnorm1 libbsd0 libmd0
      libmsgpack-dev libmsgpackc2 libhwloc-dev libhwloc15 liburing-dev liburing2
      libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3
      libsystemd-dev libsystemd0 pkgconf pkgconf-bin libpkgconf3)
FALLBACK=(libgssapi-krb5-2 libkrb5-3 libk5crypto3 libcom-err2 libkrb5support0 libkeyutils1
          libudev1)
(cd "$D" && apt-get download "${PKGS[@]}")
(cd "$D/fallback" && apt-get download "${FALLBACK[@]}")
REF=${RS_REFDATA:-../shared/refdata}
cp "$REF/stories260K.gguf" "$D/refdata/"
cp "$REF"/expected/stories260K.greedy-n256.* "$D/refdata/expected/"
for m in llama llama-hd48 qwen2 qwen3 gemma2 gemma3 phi3; do
    cp "$REF/arch/$m.gguf" "$REF/arch/$m".seq*.ids "$REF/arch/$m".seq*.logits.f32 "$D/refdata/arch/"
done
du -sh "$D"
