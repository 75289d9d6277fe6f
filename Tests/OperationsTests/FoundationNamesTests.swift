// Names and overloads that ported code expects to find, each found missing
// (or colliding) by compiling a real project's sources against the library
// (ports 37): `NSKeyValueObservation` (OTCore), `debugDescription`
// (swift-executor), and a project's own timed wait named like the library's
// (OTCore's `waitUntilAllOperationsAreFinished(timeout: DispatchTimeInterval)`).

import Dispatch
import Testing
@testable import Operations

/// OTCore's extension, reduced: before the library's overload was
/// disfavoured, `timeout: .seconds(1)` matched both and did not compile.
fileprivate extension OperationQueue {
    func waitUntilAllOperationsAreFinished(timeout: DispatchTimeInterval) -> DispatchTimeoutResult {
        let group = DispatchGroup()
        group.enter()
        DispatchQueue.global().async {
            self.waitUntilAllOperationsAreFinished()
            group.leave()
        }
        return group.wait(timeout: .now() + timeout)
    }
}

private final class DescribedOperation: Operation, @unchecked Sendable {
    override var debugDescription: String { "described" }
}

@Suite("Foundation names in ported code")
struct FoundationNamesTests {
    @Test("a project's own timed wait named like the library's is chosen for arguments both accept")
    func projectTimedWaitWins() {
        let queue = makeQueue("project-timed-wait")
        queue.addOperation {}
        let result = queue.waitUntilAllOperationsAreFinished(timeout: .seconds(5))
        #expect(result == .success)
        // The library's own, with a `Duration`, is still there.
        let finished: Bool = queue.waitUntilAllOperationsAreFinished(timeout: patience)
        #expect(finished)
    }

    @Test("NSKeyValueObservation and NSKeyValueObservedChange name the library's observation types")
    func observationNames() {
        let op = BlockOperation {}
        let heard = Recorder<Bool>()
        var tokens: [NSKeyValueObservation] = []
        tokens.append(op.observe(\.isFinished, options: [.new]) { (_, change: NSKeyValueObservedChange<Bool>) in
            heard.record(change.newValue == true)
        })
        op.start()
        #expect(heard.events == [true])
        tokens.forEach { $0.invalidate() }
    }

    @Test("debugDescription exists on operations and queues, defaults to description, and can be overridden")
    func debugDescriptions() {
        let op = BlockOperation {}
        op.name = "debugged"
        #expect(op.debugDescription == op.description)
        #expect(String(reflecting: op) == op.description)
        let queue = makeQueue("debugged-queue")
        #expect(queue.debugDescription == queue.description)
        let described: Operation = DescribedOperation()
        #expect(described.debugDescription == "described")
    }
}
