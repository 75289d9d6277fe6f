/// An operation whose body returns a typed value or throws a typed error,
/// synchronously or `async`.
///
/// ```swift
/// let fetch = ResultOperation { try await client.data(from: url) }     // ResultOperation<Data, any Error>
/// let parse = ResultOperation(after: fetch) { data in try decode(data) } // receives fetch's value
/// queue.addOperations([fetch, parse], waitUntilFinished: false)
/// let model = try await parse.value
/// ```
///
/// ## Bodies
/// - A synchronous body runs in ``Operation/main()`` on the thread that
///   starts the operation (a pool worker in a queue).
/// - An `async` body runs in a task at the priority matching the operation's
///   quality of service. Started by its queue, the task runs on the queue's
///   worker until its first suspension (on platforms whose runtime has
///   `Task.immediate`), then continues on Swift's cooperative pool; started
///   by hand, it is a detached task and `start()` returns at once. The
///   operation stays executing, holding its queue slot but no thread while
///   the body is suspended, until the body returns. ``Operation/cancel()``
///   cancels the task, so the body sees `Task.isCancelled`.
///
/// ## Results
/// ``result`` is nil until the body returns, then `.success` or `.failure`;
/// it stays nil for an operation cancelled before it started. ``value``
/// waits for the operation and returns the value, throws the body's error,
/// or throws why there is no result (`CancellationError`, or a
/// ``DependencyError`` naming the input that produced no value). A thrown
/// error is never lost: it is stored in ``result`` and
/// ``Operation/failure``.
///
/// ## Passing results along dependencies
/// `ResultOperation(after: a, b) { valueA, valueB in … }` depends on `a` and
/// `b` and receives their values as arguments: typed, without casts, and
/// without the body capturing the inputs. Such an operation uses the
/// ``DependencyFailurePolicy/cancelIfAnyFailedOrCancelled`` policy: if an
/// input fails or is cancelled, it is cancelled too, with the reasons in
/// ``Operation/dependencyErrors``. If the policy is changed to `.runAnyway`
/// and an input has no value when the body would run, the body does not run:
/// the operation finishes with a ``DependencyError`` as its
/// ``Operation/failure``. Removing an input with
/// ``Operation/removeDependency(_:)`` is a misuse
/// (``OperationMisuse/Code/resultInputRemoved``). Once it has finished the
/// operation lets go of its inputs (they leave its
/// ``Operation/dependencies``), so an input's result is released as soon as
/// nothing else holds that operation.
open class ResultOperation<Success: Sendable, Failure: Error>: Operation, @unchecked Sendable {
    // @unchecked Sendable: `body`, `storedOutcome`, `inputs` and
    // `bodyCancellation` are read and written only while the state lock bit
    // (see `Operation`) is held; `hasAsyncBody` is immutable.

    /// The work, taken (and released) when the operation starts.
    enum Body {
        case sync(@Sendable () throws(Failure) -> Success)
        case async(@Sendable () async throws(Failure) -> Success)
        /// A body fed with the inputs' values; nil when an input has none.
        case syncInputs(@Sendable ([Operation]) throws(Failure) -> Success?)
        case asyncInputs(@Sendable ([Operation]) async throws(Failure) -> Success?)
    }

    private final var body: Body?
    /// The outcome, behind a reference of a non-generic type: the paths every
    /// operation takes (start, finish, release) then need no runtime lookup
    /// of `Result<Success, Failure>`'s metadata, which in this generic class
    /// cost a few hundred instructions per use (see `ResultOutcome`).
    private final var storedOutcome: ResultOutcome?
    private final let hasAsyncBody: Bool
    /// The operations whose values the body receives, in order (also
    /// dependencies). Retained here and released once the body has run.
    private final var inputs: OperationList = .empty
    /// The bridge that cancels the running `async` body's task, from its
    /// start until the body returns (see `takeBodyCancellationLocked`).
    private final var bodyCancellation: AsyncBodyCancellation?

    /// Creates an operation that runs `work`: the designated initializer.
    ///
    /// Create operations with the initializers that take a body, which call
    /// this one. A subclass with initializers of its own calls it:
    /// `super.init(work: .async { try await fetch() })`.
    ///
    /// It takes the body wrapped because a designated initializer whose
    /// parameter is a `throws(Failure)` closure makes Swift 6.3's compiler
    /// crash (signal 11, in a vtable thunk) when a subclass fixes `Failure`
    /// to `Never` (`class Lookup: ResultOperation<Int, Never>`).
    public init(work: ResultOperationWork<Success, Failure>) {
        body = work.body
        switch work.body {
        case .async, .asyncInputs: hasAsyncBody = true
        case .sync, .syncInputs: hasAsyncBody = false
        }
        super.init()
    }

    /// Creates an operation with a synchronous body.
    public convenience init(_ body: @escaping @Sendable () throws(Failure) -> Success) {
        self.init(work: .sync(body))
    }

    /// Creates an operation with an `async` body.
    public convenience init(_ body: @escaping @Sendable () async throws(Failure) -> Success) {
        self.init(work: .async(body))
    }

    private convenience init(body: Body, inputs: [Operation]) {
        self.init(work: ResultOperationWork(body: body))
        for input in inputs {
            addDependency(input)
            withStateLock { _ in self.inputs.append(input) }
        }
        dependencyFailurePolicy = .cancelIfAnyFailedOrCancelled
    }

    /// Creates an operation that depends on `inputs` and receives their
    /// values. If an input fails or is cancelled, this operation is
    /// cancelled and its body does not run.
    public convenience init<each Input: Sendable, each InputFailure: Error>(
        after inputs: repeat ResultOperation<each Input, each InputFailure>,
        body: @escaping @Sendable (repeat each Input) throws(Failure) -> Success
    ) {
        var list: [Operation] = []
        for input in repeat each inputs { list.append(input) }
        self.init(body: .syncInputs({ operations throws(Failure) -> Success? in
            var index = 0
            let values = (repeat inputValue(ResultOperation<each Input, each InputFailure>.self, at: &index, in: operations))
            for value in repeat each values {
                if !isPresent(value) { return nil }
            }
            return try body(repeat (each values)!)
        }), inputs: list)
    }

    /// Creates an operation with an `async` body that depends on `inputs`
    /// and receives their values.
    public convenience init<each Input: Sendable, each InputFailure: Error>(
        after inputs: repeat ResultOperation<each Input, each InputFailure>,
        body: @escaping @Sendable (repeat each Input) async throws(Failure) -> Success
    ) {
        var list: [Operation] = []
        for input in repeat each inputs { list.append(input) }
        self.init(body: .asyncInputs({ operations async throws(Failure) -> Success? in
            var index = 0
            let values = (repeat inputValue(ResultOperation<each Input, each InputFailure>.self, at: &index, in: operations))
            for value in repeat each values {
                if !isPresent(value) { return nil }
            }
            return try await body(repeat (each values)!)
        }), inputs: list)
    }

    /// True for an `async` body.
    open override var isAsynchronous: Bool { hasAsyncBody }

    /// The outcome: nil until the body returns (and for an operation
    /// cancelled before it started, or whose inputs had no value), then the
    /// value or the error.
    public final var result: Result<Success, Failure>? {
        guard let outcome = withStateLock({ _ in storedOutcome }) else { return nil }
        return outcome.result(Success.self, Failure.self)
    }

    /// Waits for the operation to finish and returns its value.
    ///
    /// - Throws: The body's error; `CancellationError` when the operation
    ///   was cancelled before its body ran (by you, or by its failure
    ///   policy: the reasons are in ``Operation/dependencyErrors``); the
    ///   ``DependencyError`` naming an input that had no value (under
    ///   `.runAnyway`); or the ``OperationMisuse`` of a wait
    ///   that can never end, when a handler refused it. Cancelling the
    ///   awaiting task cancels the operation.
    public final var value: Success {
        get async throws {
            if let misuse = await awaitRetirement(wait: "await value") { throw misuse }
            guard let result else {
                if !isCancelled, let reason = failure as? DependencyError { throw reason }
                throw CancellationError()
            }
            return try result.get()
        }
    }

    /// Removes a dependency; removing an input is a misuse
    /// (``OperationMisuse/Code/resultInputRemoved``): the body needs its value.
    open override func removeDependency(_ operation: Operation) {
        if withStateLock({ _ in inputs.contains(operation) }) {
            OperationMisuse.report(
                .resultInputRemoved,
                subject: .operation(self),
                "had its input \(operation.misuseSubject) removed from its dependencies; its body receives that input's value. Create the operation without that input instead."
            )
            return
        }
        super.removeDependency(operation)
    }

    // MARK: Running

    /// Runs the body for the base `start()`: a synchronous body through
    /// `main()` on the calling thread; an `async` body in a task, the
    /// operation staying executing until it returns.
    override func runBody() -> BodyOutcome {
        guard hasAsyncBody else {
            runMainWithThreadPriority()
            return .finished
        }
        guard let taken = takeBody() else { return .finished }
        let (operations, work, carried) = (takenInputs(), taken, carriedContext)
        let queue = ThreadContext.withCurrent { $0.queue }
        let qos = effectiveQualityOfService(queue: queue)
        // Registered before the task starts: with `Task.immediate` the body
        // runs its first part inside `start`, before a handle exists, and a
        // cancellation meanwhile must reach it (`AsyncBodyCancellation`).
        let cancellation = AsyncBodyCancellation(operation: self, queue: queue)
        let cancelNow = withStateLock { state -> Bool in
            if state.isFinished { return false }
            if state.isCancelled || state.hasHandledCancellation { return true }
            bodyCancellation = cancellation
            return false
        }
        if cancelNow { cancellation.cancel() }
        let run: @Sendable () async -> Void = { [self] in
            cancellation.attachCurrentTask()
            let outcome = await OperationTaskContext.$current.withValue(OperationTaskContext(body: cancellation)) {
                () async -> ResultOutcome? in
                guard let carried else { return await Self.runAsync(work, inputs: operations) }
                var outcome: ResultOutcome?
                await carried.run { outcome = await Self.runAsync(work, inputs: operations) }
                return outcome
            }
            // Tasks the body created may outlive it: they no longer see (or
            // keep alive) this operation and its queue.
            cancellation.end()
            self.complete(with: outcome, inputs: operations)
            if AsyncBodyTask.returnedInline(self) {
                // Still inside `Task.immediate` on the drain loop's thread:
                // the loop finishes the operation as it finishes a
                // synchronous body, under the queue lock it takes anyway.
                return
            }
            if self.finishRunsUserTail {
                // Observers and a completion block are synchronous code, where
                // a blocking wait is allowed: they run on a worker of the
                // pool, which makes up for blocked workers, not on this
                // thread of Swift's cooperative pool, which no task could use
                // while they block (not even the one they may wait for).
                WorkerPool.shared.submit(ClosureJob { [self] in self.finishAsyncBody(tailQoS: nil) }, qos: qos.index)
            } else {
                self.finishAsyncBody(tailQoS: qos.index)
            }
        }
        // On the calling thread only when this operation's own queue starts
        // it from a drain loop.
        let byOwnQueue = queue != nil && owningQueueForAnalysis() === queue && AsyncBodyTask.callerIsOutsideTasks
        guard byOwnQueue else {
            cancellation.holdHandle(AsyncBodyTask.start(priority: qos.taskPriority, onCallingThread: false, run))
            return .continues
        }
        // The context is lent (`withCurrent`), not retained: it lives as
        // long as this thread.
        let (task, returned) = ThreadContext.withCurrent {
            AsyncBodyTask.startInline(self, context: $0, priority: qos.taskPriority, run)
        }
        cancellation.holdHandle(task)
        return returned ? .finished : .continues
    }

    /// Runs an `async` body on the caller's executor (no hop of its own):
    /// its value or error, or nil when an input had no value.
    private nonisolated(nonsending) static func runAsync(_ work: Body, inputs operations: [Operation]) async -> ResultOutcome? {
        do throws(Failure) {
            switch work {
            case .async(let body): return ResultValue<Success>(try await body())
            case .asyncInputs(let body): return try await runAsync(body, inputs: operations)
            case .sync, .syncInputs: return nil
            }
        } catch {
            return ResultFailure<Failure>(error)
        }
    }

    /// `runAsync` for a body fed with the inputs' values (its own function,
    /// so that the common body's frame has no `Success?` to size).
    private nonisolated(nonsending) static func runAsync(
        _ body: @Sendable ([Operation]) async throws(Failure) -> Success?,
        inputs operations: [Operation]
    ) async throws(Failure) -> ResultOutcome? {
        guard let value = try await body(operations) else { return nil }
        return ResultValue<Success>(value)
    }

    /// The `async` body has returned: the operation finishes.
    private func finishAsyncBody(tailQoS: Int?) {
        guard let plan = withThreadContext({ bodyDidFinish(wasExecuting: true, announced: false) }) else { return }
        // A completion block set from another thread after the check above
        // still runs on a worker of the pool (`tailQoS`: this thread is not
        // one), as the check intends.
        if let tailQoS, plan.hasUserTail {
            WorkerPool.shared.submit(FinishPlanJob(plan), qos: tailQoS)
        } else {
            plan.run()
        }
    }

    /// Runs a synchronous body.
    open override func main() {
        guard let taken = takeBody() else { return }
        let operations = takenInputs()
        let outcome: ResultOutcome?
        do throws(Failure) {
            switch taken {
            case .sync(let body): outcome = ResultValue<Success>(try body())
            case .syncInputs(let body): outcome = try body(operations).map { ResultValue<Success>($0) }
            case .async, .asyncInputs: outcome = nil
            }
        } catch {
            outcome = ResultFailure<Failure>(error)
        }
        complete(with: outcome, inputs: operations)
    }

    override func discardUnrunBody() {
        let body = takeBody()
        withExtendedLifetime(body) {}
    }

    private func takeBody() -> Body? {
        withStateLock { _ in
            defer { body = nil }
            return body
        }
    }

    private func takenInputs() -> [Operation] {
        withStateLock { _ in inputs.array }
    }

    /// Stores the outcome and lets go of the inputs. A nil outcome means an
    /// input had no value: the failure records which.
    private func complete(with outcome: ResultOutcome?, inputs operations: [Operation]) {
        var released = OperationList.empty
        // The body has returned: its task needs no more cancelling. The
        // bridge (which holds the task) is dropped after unlocking.
        let finishedBridge = withStateLock { _ -> AsyncBodyCancellation? in
            storedOutcome = outcome
            released = inputs.take()
            for input in operations { storedDependencies.remove(input) }
            defer { bodyCancellation = nil }
            return bodyCancellation
        }
        withExtendedLifetime(finishedBridge) {}
        // No longer held, so no longer listed: a subclass whose `isReady`
        // let it start before an input finished is still in that input's
        // dependents list, and its finish would not leave it (it leaves the
        // lists of the dependencies it still holds). Left here, under each
        // input's lock, before this operation can finish and be freed.
        for input in operations where input !== self {
            input.removeDependent(self)
        }
        if let outcome {
            if let error = outcome.error { recordFailure(error) }
        } else if let missing = operations.first(where: { !$0.hasSuccessValue }) {
            let reason: DependencyError.Reason = missing.failure.map { .failed($0) } ?? .cancelled
            recordFailure(DependencyError(dependency: missing, reason: reason))
        }
        // The inputs may be the last references to long chains: released
        // outside the lock (their release is iterative, see DependencyEdges).
        withExtendedLifetime(released) {}
        withExtendedLifetime(operations) {}
    }

    /// The body never ran (the operation was cancelled, by hand or by its
    /// failure policy): its inputs are let go of when it finishes, as after
    /// a body that ran (`complete(with:inputs:)`).
    override func takeInputsOnFinishLocked() -> OperationList {
        let taken = inputs.take()
        taken.forEach { storedDependencies.remove($0) }
        return taken
    }

    override func takeBodyCancellationLocked() -> AsyncBodyCancellation? {
        defer { bodyCancellation = nil }
        return bodyCancellation
    }

    /// Hands the inputs to the releasing walk of `deinit` (a long chain of
    /// `ResultOperation(after:)` released unrun must not recurse).
    /// Also the input named by a `DependencyError` that the body rethrew.
    override func heldOperationsLocked(into held: inout OperationList) {
        super.heldOperationsLocked(into: &held)
        if let reason = storedOutcome?.error as? DependencyError { held.append(reason.dependency) }
    }

    override func releasableOperations() -> OperationList {
        var (taken, outcome) = withStateLock { _ in
            let outcome = storedOutcome
            storedOutcome = nil
            return (inputs.take(), outcome)
        }
        // A body may have rethrown an input's `DependencyError`, which names
        // that input: hold it before the error is released (see
        // `takeEdgesForRelease`).
        if let reason = outcome?.error as? DependencyError {
            taken.append(reason.dependency)
        }
        outcome = nil
        return taken
    }

    /// Whether this operation finished with a value.
    override var hasSuccessValue: Bool {
        guard let outcome = withStateLock({ _ in storedOutcome }) else { return false }
        return outcome.error == nil
    }

    /// The rule of synchronous bodies (`OperationQueue.effectiveQualityOfService`):
    /// the queue's for `.default`, otherwise the higher of the two.
    private func effectiveQualityOfService(queue: OperationQueue?) -> QualityOfService {
        guard let queue else { return qualityOfService }
        return QualityOfService(index: OperationQueue.effectiveQualityOfService(
            operation: qualityOfService.index,
            queue: queue.qualityOfService.index
        ))
    }
}

/// The value of the input at `index` (then advanced), or nil when that input
/// produced none.
private func inputValue<Input, InputFailure>(
    _ type: ResultOperation<Input, InputFailure>.Type,
    at index: inout Int,
    in operations: [Operation]
) -> Input? {
    defer { index += 1 }
    guard index < operations.count,
          let input = operations[index] as? ResultOperation<Input, InputFailure>,
          case .success(let value)? = input.result else { return nil }
    return value
}

private func isPresent<Value>(_ value: Value?) -> Bool { value != nil }

/// A ``ResultOperation``'s body, as its designated initializer
/// ``ResultOperation/init(work:)`` takes it (subclasses' initializers use
/// it; everyone else uses the initializers that take a closure).
public struct ResultOperationWork<Success: Sendable, Failure: Error>: @unchecked Sendable {
    // @unchecked Sendable: `body` holds only `@Sendable` closures.
    let body: ResultOperation<Success, Failure>.Body

    init(body: ResultOperation<Success, Failure>.Body) {
        self.body = body
    }

    /// A synchronous body, run in ``Operation/main()``.
    public static func sync(_ body: @escaping @Sendable () throws(Failure) -> Success) -> Self {
        Self(body: .sync(body))
    }

    /// An `async` body, run in a task.
    public static func async(_ body: @escaping @Sendable () async throws(Failure) -> Success) -> Self {
        Self(body: .async(body))
    }
}

/// A finished ``ResultOperation``'s outcome, held through this non-generic
/// class so that the operation's own paths (storing it, recording a
/// failure, releasing it) use no generic type's metadata: in a generic
/// class, each use of a type built from the generic parameters, such as
/// `Result<Success, Failure>?`, asks the runtime for that type's metadata,
/// a hash-table lookup of a few hundred instructions, and an operation's
/// start-to-release path made about fifteen of them. A value or an error is
/// stored as the parameter type itself (`ResultValue`, `ResultFailure`),
/// whose metadata the generic context already has; only the box's class is
/// looked up, once, when it is made.
class ResultOutcome: @unchecked Sendable {
    // @unchecked Sendable: immutable after initialization; `error` is the
    // failure of a `Result` whose `Failure` the operation's `Sendable`
    // contract covers, as its `result` does.

    /// The error of a failure; nil for a value.
    let error: (any Error)?

    init(error: (any Error)?) {
        self.error = error
    }

    /// The outcome as the operation's `Result`.
    final func result<Success, Failure>(_: Success.Type, _: Failure.Type) -> Result<Success, Failure> {
        // The operation made this box with its own `Success` and `Failure`.
        if error != nil { return .failure(unsafeDowncast(self, to: ResultFailure<Failure>.self).failure) }
        return .success(unsafeDowncast(self, to: ResultValue<Success>.self).value)
    }
}

/// The value of a ``ResultOperation`` that succeeded.
final class ResultValue<Success>: ResultOutcome, @unchecked Sendable {
    // @unchecked Sendable: immutable after initialization; `Success` is
    // `Sendable` wherever an operation makes one.
    let value: Success

    init(_ value: Success) {
        self.value = value
        super.init(error: nil)
    }
}

/// The error of a ``ResultOperation`` that failed.
final class ResultFailure<Failure: Error>: ResultOutcome, @unchecked Sendable {
    // @unchecked Sendable: immutable after initialization (see `ResultOutcome`).
    let failure: Failure

    init(_ failure: Failure) {
        self.failure = failure
        super.init(error: failure)
    }
}
