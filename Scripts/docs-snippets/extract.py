#!/usr/bin/env python3
"""Extracts the ```swift blocks of Markdown files into a scratch Swift package.

Usage: extract.py OUTPUT_DIR OPERATIONS_PACKAGE_PATH FILE.md...

Each block becomes one source file of the `Snippets` library target, which
depends on the `Operations` product and also holds `Stubs.swift` (the names
the snippets leave undefined: `url`, `fetch`, `store`, `client`, ...).

How a block is wrapped:
- `import` lines move to the top of the file (a blank line keeps their
  place); every file also imports Operations and Synchronization.
- `#sourceLocation` maps the block back to its Markdown file, so that a
  compile error names the README's or the article's own line.
- A block that declares an `extension` (at its own top level) is compiled
  at file scope, as it is written.
- A block that starts with `override` is a member of an operation subclass:
  it is wrapped in `final class Snippet_N: Operation, @unchecked Sendable`.
- Any other block is the body of a function (`async throws` if the block
  uses `await`): statements, local types and local functions all work.

A block that imports an integration (`Logging`, `Metrics`, `Tracing` or one
of `OperationsLogging`, `OperationsMetrics`, `OperationsTracing`) goes to a
second target, `IntegrationSnippets`, built with the package's traits
`Logging`, `Metrics` and `Tracing` on, with the stubs of
`IntegrationStubs.swift`.

Skipped (listed, never compiled):
- blocks whose info string is not exactly `swift` (write ```swift-manifest,
  ```text or ```sh for code that is not meant to compile);
- blocks whose first line starts with `// swift-tools-version` (a manifest).

Prints one line per block: `N FILE:LINE (wrapping)` or `skip FILE:LINE (reason)`.
"""
import os
import re
import sys

INTEGRATION = re.compile(r'^import (Logging|Metrics|Tracing|OperationsLogging|OperationsMetrics|OperationsTracing)\b')
FENCE = re.compile(r'^(\s*)(```+|~~~+)\s*(.*?)\s*$')


def blocks(path):
    """Yields (line_number, info, lines) for every fenced block."""
    with open(path, encoding='utf-8') as handle:
        lines = handle.read().split('\n')
    index = 0
    while index < len(lines):
        match = FENCE.match(lines[index])
        if not match:
            index += 1
            continue
        indent, fence, info = match.group(1), match.group(2), match.group(3)
        start = index + 1
        body = []
        index += 1
        while index < len(lines):
            closing = lines[index].strip()
            if closing.startswith(fence[0] * len(fence)) and closing.strip(fence[0]) == '':
                break
            line = lines[index]
            body.append(line[len(indent):] if line.startswith(indent) else line.lstrip())
            index += 1
        index += 1
        yield start, info, body


def wrap(number, body, path, line):
    """Returns (kind, source). `#sourceLocation` makes the compiler report
    errors at the Markdown file's own lines."""
    imports = [text for text in body if text.startswith('import ')]
    rest = ['' if text.startswith('import ') else text for text in body]
    text = '\n'.join(rest)
    located = f'#sourceLocation(file: "{path}", line: {line + 1})\n{text}\n#sourceLocation()'
    header = ['import Operations', 'import Synchronization'] + imports
    first = next((text for text in rest if text.strip() and not text.strip().startswith('//')), '')
    if re.search(r'^(public |private |fileprivate )?extension ', text, re.M):
        kind, code = 'file scope', located
    elif first.startswith('override '):
        kind = 'member of an Operation subclass'
        code = f'final class Snippet{number}: Operation, @unchecked Sendable {{\n{located}\n}}'
    else:
        is_async = re.search(r'\bawait\b', text) is not None
        kind = 'async function body' if is_async else 'function body'
        effects = 'async throws' if is_async else 'throws'
        code = f'func snippet{number}() {effects} {{\n{located}\n}}'
    return kind, '\n'.join(header) + '\n\n' + code + '\n'


def main():
    output, package, files = sys.argv[1], sys.argv[2], sys.argv[3:]
    sources = os.path.join(output, 'Sources', 'Snippets')
    integration_sources = os.path.join(output, 'Sources', 'IntegrationSnippets')
    for folder in (sources, integration_sources):
        os.makedirs(folder, exist_ok=True)
        for name in os.listdir(folder):
            if name.startswith('Snippet') and name.endswith('.swift'):
                os.remove(os.path.join(folder, name))
    number = 0
    for path in files:
        for line, info, body in blocks(path):
            where = f'{os.path.relpath(path)}:{line}'
            if not info.startswith('swift'):
                continue
            if info != 'swift':
                print(f'skip {where} (info string "{info}")')
                continue
            if body and body[0].startswith('// swift-tools-version'):
                print(f'skip {where} (a package manifest)')
                continue
            number += 1
            kind, code = wrap(number, body, os.path.abspath(path), line)
            integration = any(INTEGRATION.match(text) for text in body)
            folder = integration_sources if integration else sources
            with open(os.path.join(folder, f'Snippet{number:03}.swift'), 'w', encoding='utf-8') as handle:
                handle.write(f'// From {where}\n' + code)
            print(f'{number:03} {where} ({kind}{", integration traits" if integration else ""})')
    identity = os.path.basename(os.path.realpath(package)).lower()
    manifest = f'''// swift-tools-version: 6.1
// Generated by Scripts/docs-snippets/extract.py: the documentation's Swift snippets.
import PackageDescription

let package = Package(
    name: "Snippets",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(path: "{package}", traits: ["Logging", "Metrics", "Tracing"]),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.7.3"),
    ],
    targets: [
        .target(
            name: "Snippets",
            dependencies: [.product(name: "Operations", package: "{identity}")]
        ),
        .target(
            name: "IntegrationSnippets",
            dependencies: [
                .product(name: "Operations", package: "{identity}"),
                .product(name: "OperationsLogging", package: "{identity}"),
                .product(name: "OperationsMetrics", package: "{identity}"),
                .product(name: "OperationsTracing", package: "{identity}"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
'''
    with open(os.path.join(output, 'Package.swift'), 'w', encoding='utf-8') as handle:
        handle.write(manifest)


if __name__ == '__main__':
    main()
