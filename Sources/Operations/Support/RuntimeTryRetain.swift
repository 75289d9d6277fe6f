#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A strong reference to an object that may be in its deinitialization,
/// without forming a weak reference.
///
/// `Operation.retainDependent` needs a strong reference to an operation that
/// nothing but its owner keeps alive, and that may therefore be
/// deinitializing at that moment (its `deinit` then waits for the lock the
/// caller holds, so its memory stays valid). A `weak` probe answers that
/// question, but it gives the object a side table for the rest of its life,
/// which sends every later retain and release of it down the runtime's slow
/// path: on a graph added in one batch, where a dependency can finish before
/// the rest of the batch is enqueued, that was most of the dependents.
///
/// The Swift runtime's `swift_tryRetain` does the same check and retain in
/// one atomic step, without a side table (it returns the object retained, or
/// null). It is found once with `dlsym` and called with the C calling
/// convention it is declared with; if a runtime does not export it, the weak
/// probe is used.
enum RuntimeTryRetain {
    /// `HeapObject *swift_tryRetain(HeapObject *)`: the object, retained,
    /// or null if its deinitialization has begun.
    private typealias Function = @convention(c) (UnsafeMutableRawPointer) -> UnsafeMutableRawPointer?

    private static let function: Function? = {
        guard let handle = dlopen(nil, RTLD_NOW),
              let symbol = dlsym(handle, "swift_tryRetain") else { return nil }
        return unsafeBitCast(symbol, to: Function.self)
    }()

    /// Whether the runtime's `swift_tryRetain` was found (else the weak
    /// probe is used).
    static var usesRuntimeEntryPoint: Bool { function != nil }

    /// A strong reference to `object`, or nil if its deinitialization has
    /// begun. `object`'s memory must be valid for the duration of the call.
    static func strongReference<Object: AnyObject>(to object: Object) -> Object? {
        guard let function else {
            weak let probe = object
            return probe
        }
        let pointer = Unmanaged.passUnretained(object).toOpaque()
        guard function(pointer) != nil else { return nil }
        // `swift_tryRetain` took the retain that this reference now owns.
        return Unmanaged<Object>.fromOpaque(pointer).takeRetainedValue()
    }
}
