#!/usr/bin/env bash
# Type-checks Tests/SourceCompatibility/*.swift, each as a client module of
# the debug build of `Operations`, in Swift 5 and Swift 6 language modes.
# A file fails if it does not compile; one whose first line is
# `// expect: warnings` must also produce a warning (a diagnostic Darwin gives
# as a warning, which must not become an error here). See the folder's README.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v swift >/dev/null 2>&1; then
    export PATH="/opt/swift/usr/bin:$PATH"
fi
swift build --product ops > /dev/null
modules="$(swift build --show-bin-path)/Modules"
failures=0
for file in Tests/SourceCompatibility/*.swift; do
    for mode in 5 6; do
        status=0
        output=$(swiftc -typecheck -swift-version "$mode" -I "$modules" "$file" 2>&1) || status=$?
        if [ "$status" -ne 0 ]; then
            echo "FAIL $file (Swift $mode): does not compile"
            echo "$output" | grep -E "error:" | head -5
            failures=$((failures + 1))
        elif head -1 "$file" | grep -q "^// expect: warnings" && ! grep -q "warning:" <<< "$output"; then
            echo "FAIL $file (Swift $mode): expected warnings, got none"
            failures=$((failures + 1))
        else
            echo "ok   $file (Swift $mode)"
        fi
    done
done
if [ "$failures" -ne 0 ]; then
    echo "=== source compatibility: $failures failure(s) ==="
    exit 1
fi
echo "=== source compatibility: passed ==="
