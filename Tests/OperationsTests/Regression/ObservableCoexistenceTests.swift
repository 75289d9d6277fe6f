// Issue 10, "names that clash with the platform": a file that uses the
// `Observation` module's `@Observable` next to `import Operations` compiles,
// and the library's observation token is `KeyValueObservation`. Against the
// old library this file does not compile ("'Observable' is not a member type
// of class 'Operations.Observation'").

import Observation
import Testing
@testable import Operations

/// A view model updated from an operation's completion block.
@Observable
final class TransferProgressModel: @unchecked Sendable {
    // @unchecked Sendable: mutated only by the completion block in the test
    // below, once, and read after the gate it opens.
    var completedTransfers = 0
}

@Suite("Issue 10 (new API): @Observable next to Operations")
struct ObservableCoexistenceTests {
    @Test("issue 10 bullet 6: @Observable compiles next to import Operations, and KeyValueObservation is the token type")
    func observableAndKeyValueObservation() {
        let model = TransferProgressModel()
        let changed = Counter()
        withObservationTracking {
            _ = model.completedTransfers
        } onChange: {
            changed.increment()
        }
        let op = BlockOperation {}
        let seen = Recorder<Bool>()
        let token: KeyValueObservation = op.observe(\.isFinished, options: [.new]) { _, change in
            if let value = change.newValue { seen.record(value) }
        }
        let completed = Gate()
        op.completionBlock = {
            model.completedTransfers += 1
            completed.open()
        }
        op.start()
        // The completion block runs asynchronously, as in Foundation.
        #expect(completed.wait())
        #expect(model.completedTransfers == 1)
        #expect(changed.count == 1, "the @Observable model did not report the change")
        #expect(seen.events == [true])
        token.invalidate()
    }
}
