/// An operation that calls a method of a target object, like Foundation's
/// `NSInvocationOperation`, in Swift's terms: the method is an unapplied
/// method reference, which can be chosen at run time.
///
/// ```swift
/// final class Resizer: Sendable {
///     func thumbnail(_ image: Image) -> Image { … }
///     func preview(_ image: Image) -> Image { … }
/// }
/// let method = wantsPreview ? Resizer.preview : Resizer.thumbnail
/// let operation = InvocationOperation(target: resizer, method: method, argument: image)
/// queue.addOperations([operation], waitUntilFinished: true)
/// let resized = operation.result as? Image
/// ```
///
/// The target is retained until the operation has run. ``result`` holds
/// what the method returned (nil for a method returning `Void`). Reading the
/// result of a cancelled invocation is a misuse
/// (``OperationMisuse/Code/cancelledInvocationResult``), as Foundation
/// raises an exception.
open class InvocationOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: `invocation` and `storedResult` are read and
    // written only while the state lock bit (see `Operation`) is held.
    private final var invocation: (@Sendable () -> (any Sendable)?)?
    private final var storedResult: (any Sendable)?

    /// Creates an operation that calls `method` on `target` with `argument`.
    ///
    /// - Parameters:
    ///   - target: The object whose method runs.
    ///   - method: An unapplied method reference such as `Resizer.thumbnail`.
    ///   - argument: The argument to pass.
    public init<Target: AnyObject & Sendable, Argument: Sendable, Result: Sendable>(
        target: Target,
        method: @escaping @Sendable (Target) -> (Argument) -> Result,
        argument: Argument
    ) {
        invocation = { invocationResult(method(target)(argument)) }
        super.init()
    }

    /// Creates an operation that calls a method without arguments on `target`.
    public init<Target: AnyObject & Sendable, Result: Sendable>(
        target: Target,
        method: @escaping @Sendable (Target) -> () -> Result
    ) {
        invocation = { invocationResult(method(target)()) }
        super.init()
    }

    /// Creates an operation from a prepared invocation (the counterpart of
    /// `init(invocation:)`): a closure whose return value becomes ``result``.
    public init(invocation: @escaping @Sendable () -> (any Sendable)?) {
        self.invocation = invocation
        super.init()
    }

    override func discardUnrunBody() {
        withExtendedLifetime(takeInvocation()) {}
    }

    /// Takes the invocation, once. The caller calls or drops it after
    /// unlocking.
    private func takeInvocation() -> (@Sendable () -> (any Sendable)?)? {
        withStateLock { _ in
            defer { invocation = nil }
            return invocation
        }
    }

    /// Calls the method and stores its result.
    open override func main() {
        guard let call = takeInvocation() else { return }
        let value = call()
        withStateLock { _ in storedResult = value }
    }

    /// What the method returned: nil until the operation finishes, for
    /// methods returning `Void`, and when the method returned nil (an
    /// optional result is unwrapped, as Foundation's is an object or nil).
    ///
    /// Reading it after the operation was cancelled is a misuse; if a
    /// handler refuses the misuse, the value is nil.
    open var result: (any Sendable)? {
        if isCancelled {
            OperationMisuse.report(
                .cancelledInvocationResult,
                subject: .operation(self),
                "had its result read after it was cancelled; a cancelled invocation has no result. Check isCancelled before reading result."
            )
            return nil
        }
        return withStateLock { _ in storedResult }
    }
}

/// What an invocation's ``InvocationOperation/result`` holds for `value`:
/// nil for `Void` and for an optional that is nil (not an `Any` wrapping
/// `nil`, which `result == nil` would not catch), else the value (a
/// non-nil optional casts to its wrapped type with `as?`).
private func invocationResult<Result: Sendable>(_ value: Result) -> (any Sendable)? {
    if Result.self == Void.self { return nil }
    if let optional = value as? any NilCheckable, optional.isNil { return nil }
    return value
}

/// An optional, asked whether it is nil without knowing its wrapped type.
private protocol NilCheckable {
    var isNil: Bool { get }
}

extension Optional: NilCheckable {
    fileprivate var isNil: Bool { self == nil }
}
