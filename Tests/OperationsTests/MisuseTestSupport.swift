// Helpers shared by the misuse suites (`MisuseTests`,
// `DependencyCycleMisuseTests`).

import Testing
@testable import Operations

/// Expects exactly one misuse with `code` whose message names `subject`.
func expectSingle(
    _ reported: [OperationMisuse],
    _ code: OperationMisuse.Code,
    naming subject: String,
    sourceLocation: SourceLocation = #_sourceLocation
) {
    #expect(reported.map(\.code) == [code], "\(reported.map(\.message))", sourceLocation: sourceLocation)
    if let misuse = reported.first {
        #expect(misuse.message.contains(subject), "message does not name \(subject): \(misuse.message)", sourceLocation: sourceLocation)
        #expect(misuse.message.contains(code.rawValue), sourceLocation: sourceLocation)
        #expect(!misuse.subject.isEmpty, sourceLocation: sourceLocation)
    }
}

func namedOperation(_ name: String, _ block: @escaping @Sendable () -> Void = {}) -> BlockOperation {
    let op = BlockOperation(block: block)
    op.name = name
    return op
}
