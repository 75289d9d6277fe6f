// The key-path forms of `willChangeValue(forKey:)` and
// `didChangeValue(forKey:)`, as Foundation's `NSObject` offers them
// (`willChangeValue(for: \.isReady)`).
//
// Each form has two overloads. The one whose root is the library's class
// (`KeyPath<Operation, Value>`) is preferred whenever the property exists
// there, so `\.isReady` written inside a subclass, even a final one that
// overrides `isReady`, names the base property, which the library knows by
// name. The generic one (`KeyPath<Self, Value>`) takes a subclass's own
// properties. Both end in the overridable string-keyed methods, as
// Foundation's do, so a subclass that overrides those sees every
// announcement.

extension Operation {
    /// Announces that the value at `keyPath` is about to change: the
    /// key-path form of ``willChangeValue(forKey:)``, which it calls with the
    /// property's name.
    ///
    /// ```swift
    /// willChangeValue(for: \.isReady)
    /// conditionsMet = true
    /// didChangeValue(for: \.isReady)
    /// ```
    public func willChangeValue<Value>(for keyPath: KeyPath<Operation, Value>) {
        willChangeValue(forKey: Operation.announcementKey(for: keyPath))
    }

    /// Announces that the value at `keyPath` has changed: the key-path form
    /// of ``didChangeValue(forKey:)``, which it calls with the property's
    /// name (so `didChangeValue(for: \.isFinished)` finishes an operation
    /// whose `isFinished` getter now returns true, as the string form does).
    public func didChangeValue<Value>(for keyPath: KeyPath<Operation, Value>) {
        didChangeValue(forKey: Operation.announcementKey(for: keyPath))
    }
}

extension KeyValueObservable where Self: Operation {
    /// Announces that a subclass's own property at `keyPath` is about to
    /// change, for observers registered with `observe(_:)` or
    /// `observe(key:)`: the key-path form of
    /// ``Operation/willChangeValue(forKey:)``, called with the property's
    /// name.
    ///
    /// A stored property is named after its declaration (`\.state` is
    /// `"state"`, `\.progress.fraction` is `"progress.fraction"`). A computed
    /// property of a subclass has no name that Swift can report: its
    /// announcement reaches the observers of that key path (which re-read
    /// the value), but not those registered by a string key. Announce such
    /// a property with ``Operation/willChangeValue(forKey:)`` instead.
    public func willChangeValue<Value>(for keyPath: KeyPath<Self, Value>) {
        willChangeValue(forKey: Self.announcementKey(for: keyPath))
    }

    /// Announces that a subclass's own property at `keyPath` has changed:
    /// the key-path form of ``Operation/didChangeValue(forKey:)``. See
    /// the will-change form for how the key is named.
    public func didChangeValue<Value>(for keyPath: KeyPath<Self, Value>) {
        didChangeValue(forKey: Self.announcementKey(for: keyPath))
    }
}

extension OperationQueue {
    /// Announces that the value at `keyPath` is about to change: the
    /// key-path form of ``willChangeValue(forKey:)``, which it calls with the
    /// property's name.
    public func willChangeValue<Value>(for keyPath: KeyPath<OperationQueue, Value>) {
        willChangeValue(forKey: OperationQueue.announcementKey(for: keyPath))
    }

    /// Announces that the value at `keyPath` has changed: the key-path form
    /// of ``didChangeValue(forKey:)``, which it calls with the property's
    /// name.
    public func didChangeValue<Value>(for keyPath: KeyPath<OperationQueue, Value>) {
        didChangeValue(forKey: OperationQueue.announcementKey(for: keyPath))
    }
}

extension KeyValueObservable where Self: OperationQueue {
    /// Announces that a subclass's own property at `keyPath` is about to
    /// change: the key-path form of
    /// ``OperationQueue/willChangeValue(forKey:)``. Named as for an
    /// operation's own properties (a stored property by its declaration).
    public func willChangeValue<Value>(for keyPath: KeyPath<Self, Value>) {
        willChangeValue(forKey: Self.announcementKey(for: keyPath))
    }

    /// Announces that a subclass's own property at `keyPath` has changed:
    /// the key-path form of ``OperationQueue/didChangeValue(forKey:)``.
    public func didChangeValue<Value>(for keyPath: KeyPath<Self, Value>) {
        didChangeValue(forKey: Self.announcementKey(for: keyPath))
    }
}

/// The string key a key-path announcement is made under.
enum KeyPathNames {
    /// Names worked out from key paths' descriptions, by key path.
    private static let described = LockedValue<[AnyKeyPath: String]>([:])

    /// `known` (the library's name for one of its own properties), else the
    /// name Swift reports for a stored property (its path after the root
    /// type: `\Download.state` is `"state"`), else the whole description.
    /// The last reaches only observers of that key path, which re-read their
    /// value on any announcement, and no observer registered by name.
    static func key(for keyPath: AnyKeyPath, known: String?) -> String {
        if let known { return known }
        if let cached = described.withLock({ $0[keyPath] }) { return cached }
        let description = String(describing: keyPath)
        let prefix = "\\" + String(describing: type(of: keyPath).rootType) + "."
        var name = description
        if description.hasPrefix(prefix) {
            let path = String(description.dropFirst(prefix.count))
            // A computed component prints as `<computed 0x… (Type)>`.
            if !path.isEmpty, !path.contains("<") { name = path }
        }
        described.withLock { $0[keyPath] = name }
        return name
    }
}
