// Regressions from probe 19 (the Swift-concurrency surface): a refused
// `queue.run` add, contexts captured by refused adds, carried values in
// extra execution blocks, and the description of a long failure chain.

import Dispatch
import Synchronization
import Testing
@testable import Operations

@Suite("async surface (regressions: probe 19)")
struct AsyncSurfaceRegressionTests {
    @Test("queue.run whose add can never proceed throws the refused misuse instead of waiting forever")
    func refusedRunThrows() {
        let full = makeQueue("run-refused-full")
        full.setPendingLimit(1)
        let other = makeQueue("run-refused-other")
        let outcome = Box<String?>(nil)
        let codes = Recorder<OperationMisuse.Code>()
        // `inner` calls run on `full`, which holds `blocked`; `blocked`
        // waits for `inner`: the run's add can never find room.
        let inner = ResultOperation<Int, Never> {
            await OperationMisuse.withHandler({ codes.record($0.code) }) {
                do {
                    _ = try await full.run { 1 }
                    outcome.value = "returned"
                } catch let misuse as OperationMisuse {
                    outcome.value = "threw \(misuse.code)"
                } catch {
                    outcome.value = "threw \(error)"
                }
            }
            return 0
        }
        let blocked = BlockOperation {}
        blocked.addDependency(inner)
        full.addOperation(blocked)
        other.addOperation(inner)
        #expect(inner.waitUntilFinished(timeout: .seconds(30)), "queue.run never returned after its add was refused")
        #expect(outcome.value == "threw \(OperationMisuse.Code.waitDeadlock)")
        #expect(codes.events == [.waitDeadlock])
        #expect(full.waitUntilAllOperationsAreFinished(timeout: patience))
    }

    @Test("an add refused for lack of room leaves the operation's carried context to the add that succeeds")
    func refusedAddDoesNotKeepContext() {
        let token = OperationContextPropagation.carry(RequestContext.$id)
        defer { token.cancel() }
        let queue = makeQueue("refused-context")
        queue.isSuspended = true
        queue.setPendingLimit(1)
        queue.addOperation {}
        let seen = Box<String?>(nil)
        let operation = BlockOperation { seen.value = RequestContext.id }
        let accepted = RequestContext.$id.withValue("refused") { queue.tryAddOperation(operation) }
        #expect(!accepted)
        queue.setPendingLimit(nil)
        RequestContext.$id.withValue("added") { queue.addOperation(operation) }
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(seen.value == "added")
    }

    @Test("an add refused as misuse (the operation is in another queue) does not give it the refused caller's context")
    func misuseRefusedAddDoesNotSetContext() {
        let first = makeQueue("context-owner")
        first.isSuspended = true
        let seen = Box<String?>("unset")
        let operation = BlockOperation { seen.value = RequestContext.id }
        first.addOperation(operation)  // nothing carried yet: propagation is off
        let token = OperationContextPropagation.carry(RequestContext.$id)
        defer { token.cancel() }
        let second = makeQueue("context-refuser")
        let refused = misuses {
            RequestContext.$id.withValue("refused") { second.addOperation(operation) }
        }
        #expect(refused.map(\.code) == [.alreadyInQueue])
        first.isSuspended = false
        #expect(first.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(seen.value == nil)
    }

    @Test("a carried context is bound in every execution block of a BlockOperation, on helper threads too")
    func contextInEveryExecutionBlock() {
        let token = OperationContextPropagation.carry(RequestContext.$id)
        defer { token.cancel() }
        let queue = makeQueue("blocks-context")
        let blocks = 3
        // Every block waits until all are running, so each runs on its own
        // thread: the starting one and pool helpers.
        let running = Latch(count: blocks)
        let seen = Recorder<String>()
        let operation = BlockOperation()
        for index in 0..<blocks {
            operation.addExecutionBlock {
                running.countDown()
                let together = running.wait(timeout: patience)
                seen.record("\(index): \(RequestContext.id ?? "nil") \(together ? "together" : "alone")")
            }
        }
        RequestContext.$id.withValue("req-42") { queue.addOperation(operation) }
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(seen.events.sorted() == (0..<blocks).map { "\($0): req-42 together" })
    }

    @Test("the description of a failure propagated along a long chain is short and does not recurse")
    func longChainDescription() {
        struct Offline: Error {}
        let queue = makeQueue("failure-chain")
        let download = ResultOperation<Int, any Error> { throw Offline() }
        download.name = "download"
        var steps: [Operation] = [download]
        let length = 50_000
        for index in 0..<length {
            let step = BlockOperation {}
            step.name = "step\(index)"
            step.dependencyFailurePolicy = .cancelIfAnyFailed
            step.addDependency(steps[steps.count - 1])
            steps.append(step)
        }
        queue.addOperations(steps, waitUntilFinished: false)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: .seconds(60)))
        guard let failure = steps[steps.count - 1].failure else {
            Issue.record("the last step has no failure")
            return
        }
        let text = "\(failure)"
        #expect(text.count < 500, "\(text.prefix(300))…")
        #expect(text.hasPrefix("BlockOperation \"step\(length - 2)\""), "\(text.prefix(120))")
        #expect(text.contains("more"))
        #expect(text.hasSuffix("failed: \(Offline())"), "\(text.suffix(120))")
        // A short chain names every link.
        let short = steps[3].failure.map { "\($0)" } ?? ""
        #expect(!short.contains("more"), "\(short)")
        #expect(short.contains("step1") && short.contains("step0") && short.contains("download"), "\(short)")
    }
}
