import Synchronization
import Testing
@testable import Operations

private struct ParseError: Error, Equatable { let line: Int }

@Suite("typed results and failure policies")
struct ResultOperationTests {
    @Test("a synchronous body's value and typed error are captured")
    func syncResults() {
        let ok = ResultOperation { () -> Int in 42 }
        ok.start()
        #expect(ok.result?.get() == 42)

        let failing = ResultOperation { () throws(ParseError) -> Int in throw ParseError(line: 3) }
        failing.start()
        // The error type is ParseError: no cast is needed to read it.
        guard case .failure(let error)? = failing.result else {
            Issue.record("expected a failure")
            return
        }
        #expect(error == ParseError(line: 3))
        #expect(failing.failure as? ParseError == ParseError(line: 3))
        #expect(failing.isFinished)
    }

    @Test("dependents receive their inputs' values, typed, in order")
    func valuesAlongDependencies() async throws {
        let number = ResultOperation { 20 }
        let word = ResultOperation { () throws(ParseError) -> String in "apples" }
        let sentence = ResultOperation(after: number, word) { count, noun in "\(count + 1) \(noun)" }
        #expect(sentence.dependencies.count == 2)
        let queue = OperationQueue()
        queue.addOperations([sentence, word, number], waitUntilFinished: false)
        try await withTimeLimit { await queue.drained() }
        #expect(sentence.result?.get() == "21 apples")
        let value = try await withTimeLimit { try await sentence.value }
        #expect(value == "21 apples")
    }

    @Test("an async dependent receives values too")
    func asyncValuesAlongDependencies() async throws {
        let source = ResultOperation { () async in [1, 2, 3] }
        let sum = ResultOperation(after: source) { (values: [Int]) async -> Int in values.reduce(0, +) }
        let queue = OperationQueue()
        await queue.addOperationsWhenRoom([sum, source])
        let total = try await withTimeLimit { try await sum.value }
        #expect(total == 6)
    }

    @Test("a failed input cancels its consumers, with the reasons collected")
    func failingInputCancelsConsumers() async throws {
        let ran = LockedValue(false)
        let parse = ResultOperation { () throws(ParseError) -> Int in throw ParseError(line: 9) }
        let double = ResultOperation(after: parse) { (value: Int) -> Int in
            ran.withLock { $0 = true }
            return value * 2
        }
        let report = ResultOperation(after: double) { (value: Int) in "\(value)" }
        let queue = OperationQueue()
        queue.addOperations([report, double, parse], waitUntilFinished: false)
        try await withTimeLimit { await queue.drained() }
        #expect(!ran.withLock { $0 })
        #expect(double.isCancelled)
        #expect(report.isCancelled)
        #expect(double.dependencyErrors.count == 1)
        guard case .failed(let error)? = double.dependencyErrors.first?.reason else {
            Issue.record("expected a failed dependency")
            return
        }
        #expect(error as? ParseError == ParseError(line: 9))
        #expect(double.dependencyErrors.first?.dependency === parse)
        // The cancellation propagates: report's reason is double's failure.
        #expect(report.dependencyErrors.first?.dependency === double)
        await #expect(throws: CancellationError.self) { try await report.value }
    }

    @Test("the default policy is Foundation's: dependents run anyway")
    func defaultPolicyRunsAnyway() {
        let failing = ResultOperation { () throws(ParseError) -> Int in throw ParseError(line: 1) }
        let cancelled = BlockOperation {}
        cancelled.cancel()
        let ran = LockedValue(false)
        let dependent = BlockOperation { ran.withLock { $0 = true } }
        #expect(dependent.dependencyFailurePolicy == .runAnyway)
        dependent.addDependency(failing)
        dependent.addDependency(cancelled)
        let queue = OperationQueue()
        queue.addOperations([dependent, failing, cancelled], waitUntilFinished: false)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(ran.withLock { $0 })
        #expect(!dependent.isCancelled)
        #expect(dependent.dependencyErrors.isEmpty)
    }

    @Test("cancelIfAnyFailed ignores plain cancellations; cancelIfAnyFailedOrCancelled does not")
    func policiesDiffer() {
        let cancelled = BlockOperation {}
        cancelled.cancel()
        let tolerant = BlockOperation {}
        tolerant.dependencyFailurePolicy = .cancelIfAnyFailed
        tolerant.addDependency(cancelled)
        let strict = BlockOperation {}
        strict.dependencyFailurePolicy = .cancelIfAnyFailedOrCancelled
        strict.addDependency(cancelled)
        let queue = OperationQueue()
        queue.addOperations([tolerant, strict, cancelled], waitUntilFinished: false)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(!tolerant.isCancelled)
        #expect(strict.isCancelled)
        guard case .cancelled? = strict.dependencyErrors.first?.reason else {
            Issue.record("expected a cancelled dependency")
            return
        }
    }

    @Test("a policy also applies to a dependency that had already failed")
    func policyWithAlreadyFailedDependency() {
        let failing = ResultOperation { () throws(ParseError) -> Int in throw ParseError(line: 2) }
        failing.start()
        let dependent = BlockOperation {}
        dependent.dependencyFailurePolicy = .cancelIfAnyFailed
        dependent.addDependency(failing)
        dependent.start()
        #expect(dependent.isCancelled)
        #expect(dependent.isFinished)
        #expect(dependent.dependencyErrors.count == 1)
    }

    @Test("inputs are released once their consumers have finished")
    func inputsReleased() async throws {
        weak var weakPayload: Payload?
        weak var weakInput: ResultOperation<Payload, Never>?
        let consumer: ResultOperation<Int, Never>
        do {
            let input = ResultOperation { Payload(5) }
            weakInput = input
            consumer = ResultOperation(after: input) { (payload: Payload) in payload.value }
            let queue = OperationQueue()
            queue.addOperations([consumer, input], waitUntilFinished: false)
            try await withTimeLimit { await queue.drained() }
            weakPayload = input.result?.get()
            #expect(weakPayload != nil)
        }
        // The consumer is still alive and holds its value...
        #expect(consumer.result?.get() == 5)
        // ...but no longer holds its input, nor the input's result.
        #expect(consumer.dependencies.isEmpty)
        #expect(weakInput == nil)
        #expect(weakPayload == nil)
    }

    @Test("no retain cycle between an operation, its result and its dependents")
    func noRetainCycle() {
        weak var weakFirst: Operation?
        weak var weakSecond: Operation?
        do {
            let first = ResultOperation { Payload(1) }
            let second = ResultOperation(after: first) { (payload: Payload) in payload.value }
            second.completionBlock = { _ = second.result }
            weakFirst = first
            weakSecond = second
            let queue = OperationQueue()
            queue.addOperations([first, second], waitUntilFinished: false)
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        }
        // The completion block (which holds `second`) runs asynchronously,
        // as in Foundation: the operations go once it has run.
        #expect(waitUntil { weakFirst == nil && weakSecond == nil })
    }
}

/// Subclasses that fix `Failure` to `Never`: before `init(_work:)` was the
/// designated initializer, these crashed the compiler (signal 11).
private final class CountedLookup: ResultOperation<Int, Never>, @unchecked Sendable {
    let label = "lookup"
}

private class TypedNeverFailing<Value: Sendable>: ResultOperation<Value, Never>, @unchecked Sendable {}

/// A subclass with an initializer of its own calls the designated one.
private final class Flagged: ResultOperation<Bool, Never>, @unchecked Sendable {
    init(flag: Bool) {
        super.init(work: .sync { flag })
    }
}

/// Ready whatever its inputs: its queue starts it before they finish.
private final class EagerResult: ResultOperation<Int, Never>, @unchecked Sendable {
    override var isReady: Bool { true }
}

@Suite("ResultOperation subclasses")
struct ResultOperationSubclassTests {
    @Test("a subclass that starts before its input finishes, then is freed, leaves the input's dependents list")
    func eagerSubclassFreedBeforeItsInput() {
        let queue = makeQueue("eager")
        let gate = Gate()
        let input = ResultOperation<Int, Never> {
            gate.wait()
            return 1
        }
        weak var weakEager: EagerResult?
        do {
            let eager = EagerResult(after: input) { (value: Int) -> Int in value + 1 }
            weakEager = eager
            queue.addOperations([input, eager], waitUntilFinished: false)
            #expect(eager.waitUntilFinished(timeout: patience))
            #expect(!input.isFinished)
            #expect(eager.failure is DependencyError, "its input had no value yet")
        }
        // Freed while its input has not finished: the input's finish must
        // not find it in its dependents list (ASan: heap-use-after-free).
        #expect(waitUntil { weakEager == nil })
        gate.open()
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(input.isFinished)
    }

    @Test("subclasses with Failure == Never compile and inherit every initializer (regression)")
    func neverFailingSubclasses() async throws {
        let sync = CountedLookup { 41 }
        let async = CountedLookup { () async in 1 }
        let generic = TypedNeverFailing<String> { "value" }
        let queue = OperationQueue()
        queue.addOperations([sync, async, generic], waitUntilFinished: false)
        let total = try await withTimeLimit { try await sync.value + async.value }
        #expect(total == 42)
        #expect(sync.label == "lookup")
        #expect(try await withTimeLimit { try await generic.value } == "value")
        let flagged = Flagged(flag: true)
        await queue.addOperationWhenRoom(flagged)
        #expect(try await withTimeLimit { try await flagged.value })
    }

    @Test("a ResultOperation whose body never ran lets go of its inputs when it finishes (regression: probe D4)", arguments: [false, true])
    func cancelledDependentLetsGoOfInputs(byPolicy: Bool) {
        let tracker = LifetimeTracker()
        let queue = OperationQueue()
        var dependent: ResultOperation<Int, Never>?
        do {
            let input = tracker.track(ResultOperation<Int, Never> { 1 }, "input")
            let made = ResultOperation(after: input) { (value: Int) -> Int in value }
            // Cancelled by hand, or by its failure policy (the input cancelled).
            if byPolicy { input.cancel() } else { made.cancel() }
            queue.addOperations([input, made], waitUntilFinished: false)
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
            dependent = made
        }
        #expect(dependent?.isFinished == true)
        #expect(dependent?.dependencies.isEmpty == true, "the finished operation still lists its input")
        if byPolicy {
            // The failure policy's reason names the input (`dependencyErrors`),
            // which keeps it, as documented.
            #expect(dependent?.dependencyErrors.count == 1)
        } else {
            #expect(tracker.waitForRelease().isEmpty, "the input outlived its finished dependent's use of it")
        }
        withExtendedLifetime(dependent) {}
    }
}

