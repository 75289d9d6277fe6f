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
///   quality of service. The operation stays executing, holding its queue
///   slot but no thread, until the body returns. ``Operation/cancel()``
///   cancels the task, so the body sees `Task.isCancelled`.
///
/// ## Results
/// ``result`` is nil until the body returns, then `.success` or `.failure`;
/// it stays nil for an operation cancelled before it started. ``value``
/// waits for the operation and returns the value, throws the body's error,
/// or throws `CancellationError` if there is no result. A thrown error is
/// never lost: it is stored in ``result`` and ``Operation/failure``.
///
/// ## Passing results along dependencies
/// `ResultOperation(after: a, b) { valueA, valueB in … }` depends on `a` and
/// `b` and receives their values as arguments: typed, without casts, and
/// without the body capturing the inputs. Such an operation uses the
/// ``DependencyFailurePolicy/cancelIfAnyFailedOrCancelled`` policy: if an
/// input fails or is cancelled, it is cancelled too, with the reasons in
/// ``Operation/dependencyErrors``. Once it has finished it lets go of its
/// inputs (its ``Operation/dependencies`` become empty), so an input's
/// result is released as soon as nothing else holds that operation.
open class ResultOperation<Success: Sendable, Failure: Error>: Operation, @unchecked Sendable {
    // @unchecked Sendable: `body`, `storedResult` and `releasesInputs` are
    // read and written only while the state lock bit (see `Operation`) is held.

    /// The work, taken (and released) when the operation starts.
    enum Body {
        case sync(@Sendable () throws(Failure) -> Success)
        case async(@Sendable () async throws(Failure) -> Success)
    }

    private final var body: Body?
    private final var storedResult: Result<Success, Failure>?
    private final let hasAsyncBody: Bool
    private final var releasesInputs = false

    /// Creates an operation with a synchronous body.
    public init(_ body: @escaping @Sendable () throws(Failure) -> Success) {
        self.body = .sync(body)
        hasAsyncBody = false
        super.init()
    }

    /// Creates an operation with an `async` body.
    public init(_ body: @escaping @Sendable () async throws(Failure) -> Success) {
        self.body = .async(body)
        hasAsyncBody = true
        super.init()
    }

    /// Creates an operation that depends on `inputs` and receives their
    /// values. If an input fails or is cancelled, this operation is
    /// cancelled and its body does not run.
    public convenience init<each Input: Sendable, each InputFailure: Error>(
        after inputs: repeat ResultOperation<each Input, each InputFailure>,
        body: @escaping @Sendable (repeat each Input) throws(Failure) -> Success
    ) {
        let captured = (repeat each inputs)
        self.init { () throws(Failure) -> Success in
            // The failure policy guarantees every input succeeded.
            let values = (repeat (each captured).successValueAfterPolicy())
            return try body(repeat each values)
        }
        for input in repeat each inputs { addDependency(input) }
        dependencyFailurePolicy = .cancelIfAnyFailedOrCancelled
        withStateLock { _ in releasesInputs = true }
    }

    /// Creates an operation with an `async` body that depends on `inputs`
    /// and receives their values.
    public convenience init<each Input: Sendable, each InputFailure: Error>(
        after inputs: repeat ResultOperation<each Input, each InputFailure>,
        body: @escaping @Sendable (repeat each Input) async throws(Failure) -> Success
    ) {
        let captured = (repeat each inputs)
        self.init { () async throws(Failure) -> Success in
            let values = (repeat (each captured).successValueAfterPolicy())
            return try await body(repeat each values)
        }
        for input in repeat each inputs { addDependency(input) }
        dependencyFailurePolicy = .cancelIfAnyFailedOrCancelled
        withStateLock { _ in releasesInputs = true }
    }

    /// True for an `async` body.
    open override var isAsynchronous: Bool { hasAsyncBody }

    /// The outcome: nil until the body returns (and for an operation
    /// cancelled before it started), then the value or the error.
    public final var result: Result<Success, Failure>? {
        withStateLock { _ in storedResult }
    }

    /// Waits for the operation to finish and returns its value.
    ///
    /// - Throws: The body's error, or `CancellationError` when the operation
    ///   was cancelled before its body ran. Cancelling the awaiting task
    ///   cancels the operation.
    public final var value: Success {
        get async throws {
            await finished()
            guard let result else { throw CancellationError() }
            return try result.get()
        }
    }

    // MARK: Running

    /// Starts the body: a synchronous body runs through `main()` on the
    /// calling thread; an `async` body starts in a task and the operation
    /// stays executing until it returns.
    open override func start() {
        guard hasAsyncBody else {
            super.start()
            return
        }
        unowned(unsafe) let context = ThreadContext.current
        guard beginStart(context: context) else { return }
        guard case .async(let work)? = takeBody() else {
            finish(announced: false)
            return
        }
        let queue = context.queue
        let qos = effectiveQualityOfService(queue: queue)
        let task = Task.detached(priority: qos.taskPriority) { [self] in
            let outcome = await OperationTaskContext.$current.withValue(
                OperationTaskContext(operation: self, queue: queue)
            ) { () async -> Result<Success, Failure> in
                do throws(Failure) {
                    return .success(try await work())
                } catch {
                    return .failure(error)
                }
            }
            self.complete(with: outcome)
            self.finish(announced: false)
        }
        onCancel { task.cancel() }
    }

    /// Runs a synchronous body.
    open override func main() {
        guard case .sync(let work)? = takeBody() else { return }
        let outcome: Result<Success, Failure>
        do throws(Failure) {
            outcome = .success(try work())
        } catch {
            outcome = .failure(error)
        }
        complete(with: outcome)
    }

    private func takeBody() -> Body? {
        withStateLock { _ in
            defer { body = nil }
            return body
        }
    }

    private func complete(with outcome: Result<Success, Failure>) {
        var inputs = OperationList.empty
        withStateLock { _ in
            storedResult = outcome
            if releasesInputs { inputs = storedDependencies.take() }
        }
        withExtendedLifetime(inputs) {}
        if case .failure(let error) = outcome { recordFailure(error) }
    }

    /// The value of a finished input whose success the failure policy checked.
    final func successValueAfterPolicy() -> Success {
        guard case .success(let value)? = result else {
            preconditionFailure("\(misuseSubject) has no value although the failure policy let its dependent run")
        }
        return value
    }

    private func effectiveQualityOfService(queue: OperationQueue?) -> QualityOfService {
        let own = qualityOfService
        if own != .default { return own }
        return queue?.qualityOfService ?? .default
    }
}

/// The operation an `async` body runs for, as a task-local value, so that
/// `OperationQueue.current` and deadlock checks work inside async bodies.
struct OperationTaskContext: Sendable {
    let operation: Operation
    let queue: OperationQueue?

    @TaskLocal static var current: OperationTaskContext?
}
