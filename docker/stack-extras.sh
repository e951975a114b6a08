#!/usr/bin/env bash
# Fills docker/stack-extras/ from this host (see its README.md): the host's added CA certificates, and
# the torch wheel pip finds in $PIP_FIND_LINKS, for building the stack image where the package index is
# behind a TLS-intercepting proxy or download.pytorch.org is out of reach.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)/stack-extras"
mkdir -p "$here/ca" "$here/wheels"
cp /usr/local/share/ca-certificates/*.crt "$here/ca/" 2>/dev/null || true
torch=$(grep -E '^torch==' "$here/../../constraints/cpu.txt" | cut -d= -f3)
for dir in ${PIP_FIND_LINKS:-}; do
    cp "$dir"/torch-"$torch"+cpu-*.whl "$here/wheels/" 2>/dev/null || true
done
echo "stack-extras: $(ls "$here/ca" | wc -l) CA certificate(s), $(ls "$here/wheels" | wc -l) wheel(s)"
