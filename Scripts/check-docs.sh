#!/usr/bin/env bash
# Checks the documentation. Exits non-zero on any failure.
#
#   1. DocC: `swift package generate-documentation --target Operations` must
#      print no warning (from the catalogue Sources/Operations/Operations.docc
#      or from doc comments in the sources).
#   2. Snippets: every ```swift block of README.md and of the catalogue's
#      articles must compile against the Operations product, with the stubs
#      of Scripts/docs-snippets/Stubs.swift (rules: Scripts/docs-snippets/extract.py).
#
# Usage: bash Scripts/check-docs.sh [--docs-only | --snippets-only]
#
# Builds in .build-docs/ (git-ignored). The DocC plugin is a dependency only
# while OPERATIONS_DOCS is set (see Package.swift); Package.resolved, which
# resolving it rewrites, is put back as it was afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"

if ! command -v swift >/dev/null 2>&1; then
    export PATH="/opt/swift/usr/bin:$PATH"
fi

run_docs=1
run_snippets=1
case "${1:-}" in
    --docs-only) run_snippets=0 ;;
    --snippets-only) run_docs=0 ;;
    "") ;;
    *) echo "usage: $0 [--docs-only | --snippets-only]" >&2; exit 2 ;;
esac

scratch="$root/.build-docs"
mkdir -p "$scratch"
start=$(date +%s)
failed=0

if [ "$run_docs" = 1 ]; then
    echo "=== DocC: generate-documentation --target Operations ==="
    # Keep the checkout's Package.resolved (or its absence) as it was.
    resolved_backup=""
    if [ -f Package.resolved ]; then
        resolved_backup="$scratch/Package.resolved.saved"
        cp Package.resolved "$resolved_backup"
    fi
    restore_resolved() {
        if [ -n "$resolved_backup" ]; then
            cp "$resolved_backup" Package.resolved
        else
            rm -f Package.resolved
        fi
    }
    trap restore_resolved EXIT
    log="$scratch/docc.log"
    status=0
    OPERATIONS_DOCS=1 swift package --scratch-path "$scratch" \
        generate-documentation --target Operations >"$log" 2>&1 || status=$?
    restore_resolved
    trap - EXIT
    warnings=$(grep -c -E '^(warning|error):' "$log" || true)
    if [ "$status" != 0 ] || [ "$warnings" != 0 ]; then
        grep -E -A12 '^(warning|error):' "$log" || tail -n 40 "$log"
        echo "DocC: FAILED (exit $status, $warnings warnings or errors; full log: $log)"
        failed=1
    else
        echo "DocC: no warnings ($(grep -c '' "$log") lines of output in $log)"
    fi
fi

if [ "$run_snippets" = 1 ]; then
    echo "=== Snippets: README.md and the catalogue's articles ==="
    package="$scratch/snippets"
    mkdir -p "$package/Sources/Snippets"
    shopt -s nullglob
    python3 Scripts/docs-snippets/extract.py "$package" "$root" \
        README.md Sources/Operations/Operations.docc/*.md
    cp Scripts/docs-snippets/Stubs.swift "$package/Sources/Snippets/Stubs.swift"
    cp Scripts/docs-snippets/IntegrationStubs.swift "$package/Sources/IntegrationSnippets/IntegrationStubs.swift"
    log="$scratch/snippets.log"
    status=0
    # Without OPERATIONS_DOCS: the snippets see the package as a client does.
    (cd "$package" && env -u OPERATIONS_DOCS swift build --scratch-path "$package/.build") >"$log" 2>&1 || status=$?
    if [ "$status" != 0 ]; then
        # SwiftPM repeats each diagnostic; show each error once, at its Markdown line.
        grep -E '^/.*: error: ' "$log" | sed "s|^$root/||" | sort -u || tail -n 60 "$log"
        echo "Snippets: FAILED (full log: $log; sources in $package/Sources/Snippets)"
        failed=1
    else
        echo "Snippets: all compile"
    fi
fi

echo "=== check-docs: $([ "$failed" = 0 ] && echo passed || echo FAILED) in $(( $(date +%s) - start )) s ==="
exit "$failed"
