/// What an observer wants to receive, shaped like Foundation's
/// `NSKeyValueObservingOptions` (same raw values).
public struct ObservationOptions: OptionSet, Sendable, Hashable {
    /// The option bits, with Foundation's values.
    public let rawValue: UInt
    /// Creates options from their bits.
    public init(rawValue: UInt) { self.rawValue = rawValue }

    /// Include the new value in each change.
    public static let new = ObservationOptions(rawValue: 0x01)
    /// Include the value from before the change.
    public static let old = ObservationOptions(rawValue: 0x02)
    /// Send one change immediately, when observation starts.
    public static let initial = ObservationOptions(rawValue: 0x04)
    /// Also send a change before each change (`isPrior == true`).
    public static let prior = ObservationOptions(rawValue: 0x08)
}

/// One observed change, shaped like Foundation's `NSKeyValueObservedChange`.
public struct ObservedChange<Value> {
    /// The kind of change, with Foundation's raw values. Operations and
    /// queues only ever report `.setting`.
    public enum Kind: UInt, Sendable {
        /// The value was set (the only kind operations and queues report).
        case setting = 1
        /// Elements were inserted into a collection value.
        case insertion = 2
        /// Elements were removed from a collection value.
        case removal = 3
        /// Elements of a collection value were replaced.
        case replacement = 4
    }

    /// Always `.setting` for the keys this library reports.
    public let kind: Kind
    /// The value after the change, if `.new` was requested (nil in a prior
    /// notification).
    public let newValue: Value?
    /// The value before the change, if `.old` was requested.
    public let oldValue: Value?
    /// Whether this notification comes before the change (`.prior`).
    public let isPrior: Bool

    init(kind: Kind = .setting, newValue: Value?, oldValue: Value?, isPrior: Bool) {
        self.kind = kind
        self.newValue = newValue
        self.oldValue = oldValue
        self.isPrior = isPrior
    }
}

extension ObservedChange: Sendable where Value: Sendable {}

extension ObservedChange: CustomStringConvertible {
    /// A short human-readable form.
    public var description: String {
        var parts = ["kind = \(kind.rawValue)"]
        if let newValue { parts.append("new = \(newValue)") }
        if let oldValue { parts.append("old = \(oldValue)") }
        if isPrior { parts.append("notificationIsPrior = 1") }
        return "{" + parts.joined(separator: "; ") + ";}"
    }
}

/// Foundation's name for ``KeyValueObservation``, so that code that keeps
/// its tokens as `[NSKeyValueObservation]` compiles unchanged. In a file
/// that also imports Apple's Foundation, which has a type of that name,
/// import this one by name (`import typealias Operations.NSKeyValueObservation`).
public typealias NSKeyValueObservation = KeyValueObservation

/// Foundation's name for ``ObservedChange``, the value a change handler
/// receives.
public typealias NSKeyValueObservedChange<Value> = ObservedChange<Value>

/// Foundation's name for ``ObservationOptions``, the options an observer
/// registers with (`[.new, .old]`, `.initial`, `.prior`).
public typealias NSKeyValueObservingOptions = ObservationOptions

/// A registered observation. It observes until ``invalidate()`` is called
/// or the token is released, whichever comes first.
///
/// Keep the token alive as long as you want notifications. The token does
/// not keep the observed object alive.
public final class KeyValueObservation: Sendable {
    private let registration: LockedValue<(ObservationRegistry, AnyObserverEntry)?>

    init(registry: ObservationRegistry, entry: AnyObserverEntry) {
        registration = LockedValue((registry, entry))
    }

    /// Stops the observation. No notification is delivered after this
    /// returns, except one that had already begun on another thread.
    /// Calling it again does nothing.
    public func invalidate() {
        guard let (registry, entry) = registration.withLock({ value in
            let taken = value
            value = nil
            return taken
        }) else { return }
        entry.invalidate()
        registry.remove(entry)
    }

    deinit {
        invalidate()
    }
}

/// Objects whose properties can be observed with
/// `observe(_:options:changeHandler:)`: ``Operation`` and ``OperationQueue``.
///
/// The shape follows Foundation's `NSObject.observe(_:options:changeHandler:)`.
public protocol KeyValueObservable: AnyObject {}
