extension Operation: KeyValueObservable, ObservationHost {}

extension KeyValueObservable where Self: Operation {
    /// Observes a property, like Foundation's `NSObject.observe(_:options:changeHandler:)`.
    ///
    /// ```swift
    /// let token = operation.observe(\.isFinished, options: [.old, .new]) { op, change in
    ///     print(op.name ?? "op", change.oldValue!, "→", change.newValue!)
    /// }
    /// ```
    ///
    /// The library reports `isReady`, `isCancelled`, `isExecuting`,
    /// `isFinished`, `isConcurrent`, `isAsynchronous`, `dependencies`,
    /// `queuePriority`, `completionBlock`, `name`, `qualityOfService` and
    /// `threadPriority` when they change, and any key a subclass announces
    /// with ``Operation/willChangeValue(forKey:)`` /
    /// ``Operation/didChangeValue(forKey:)``. For another key path (a
    /// subclass's own property), the handler runs after any announced change
    /// that altered the key path's value; announce it with `didChangeValue`.
    ///
    /// A key path to a property that a **final** subclass overrides (for
    /// example `\.isExecuting` on `final class Download: Operation` that
    /// overrides `isExecuting`), or that a subclass overrides with a `final`
    /// override (`override final var isReady`), is, in Swift, a different
    /// key path from the base class's, and carries no name: the library then
    /// treats it like a subclass's own property (reported after changes of
    /// its value, without `.prior`; an announcement that leaves the value
    /// as it was is not reported, where Foundation reports every one). For Foundation's exact will/did semantics in that case,
    /// observe through `Operation` (`(download as Operation).observe(\.isExecuting)`)
    /// or by string key (`observe(key: "isExecuting")`).
    ///
    /// With `.old`, each change reports the value read when that change was
    /// announced with a will-change on the same thread (nested changes of
    /// one key too, innermost first), as Foundation keeps pending changes
    /// per thread. A did-change on a thread that announced no will-change
    /// to this observer reports no old value.
    ///
    /// Notifications arrive on the thread that made the change, in the order
    /// of the changes, never while a library lock is held. For lifecycle
    /// changes the order is the one Foundation produces, for example
    /// `isExecuting` YES→NO before `isFinished` NO→YES.
    ///
    /// - Returns: A token; observation ends when it is invalidated or released.
    @preconcurrency
    public func observe<Value>(
        _ keyPath: KeyPath<Self, Value>,
        options: ObservationOptions = [],
        changeHandler: @escaping @Sendable (Self, ObservedChange<Value>) -> Void
    ) -> KeyValueObservation {
        startObserving(self, key: Self.observationKey(for: keyPath), options: options, read: { $0[keyPath: keyPath] }, handler: changeHandler)
    }

    /// Observes a key by name, for keys that have no key path (for example a
    /// subclass's property announced with `didChangeValue(forKey:)`).
    ///
    /// Values are read from the library's own properties for its keys, and
    /// otherwise by reflection from a stored property named `key` (or
    /// `_key`); a key that cannot be read gives nil values.
    @preconcurrency
    public func observe(
        key: String,
        options: ObservationOptions = [],
        changeHandler: @escaping @Sendable (Self, ObservedChange<Any?>) -> Void
    ) -> KeyValueObservation {
        startObserving(self, key: key, options: options, read: { $0.valueForObservedKey(key) }, handler: changeHandler)
    }

    /// The key an announcement for `keyPath` is made under: the library's
    /// name for one of its own properties, else the name Swift reports
    /// (``KeyPathNames``).
    static func announcementKey<Value>(for keyPath: KeyPath<Self, Value>) -> String {
        KeyPathNames.key(for: keyPath, known: observationKey(for: keyPath))
    }

    /// The key a key path stands for, or nil for a key path the library
    /// cannot name (observed by re-evaluation).
    static func observationKey<Value>(for keyPath: KeyPath<Self, Value>) -> String? {
        ObservedKeyNames.name(of: keyPath, in: Self.self) {
            [
                (\Self.isFinished, "isFinished"),
                (\Self.isExecuting, "isExecuting"),
                (\Self.isReady, "isReady"),
                (\Self.isCancelled, "isCancelled"),
                (\Self.isConcurrent, "isConcurrent"),
                (\Self.isAsynchronous, "isAsynchronous"),
                (\Self.dependencies, "dependencies"),
                (\Self.queuePriority, "queuePriority"),
                (\Self.completionBlock, "completionBlock"),
                (\Self.name, "name"),
                (\Self.qualityOfService, "qualityOfService"),
                (\Self.threadPriority, "threadPriority"),
            ]
        }
    }
}

/// The names of the key paths the library reports, per class.
///
/// A key path written in a generic context (`\Self.isFinished`) is built by
/// the runtime each time it is evaluated, about 10k instructions each: built
/// on every `observe(_:)` call, the table cost about 130k instructions per
/// observation. It is built once per class, and looked up by hash.
enum ObservedKeyNames {
    private static let tables = LockedValue<[ObjectIdentifier: [AnyKeyPath: String]]>([:])

    /// The name of `keyPath` among those `known` lists for `type` (asked
    /// once per type), or nil.
    static func name(of keyPath: AnyKeyPath, in type: Any.Type, known: () -> [(AnyKeyPath, String)]) -> String? {
        let id = ObjectIdentifier(type)
        if let table = tables.withLock({ $0[id] }) { return table[keyPath] }
        let table = Dictionary(known(), uniquingKeysWith: { first, _ in first })
        // A table another thread stored meanwhile is kept: nothing is
        // released under the lock.
        tables.withLock { tables in
            if tables[id] == nil { tables[id] = table }
        }
        return table[keyPath]
    }
}

extension Operation {
    /// The value for a key of string-keyed observation.
    final func valueForObservedKey(_ key: String) -> Any? {
        switch key {
        case "isFinished": return isFinished
        case "isExecuting": return isExecuting
        case "isReady": return isReady
        case "isCancelled": return isCancelled
        case "isConcurrent": return isConcurrent
        case "isAsynchronous": return isAsynchronous
        case "dependencies": return dependencies
        case "queuePriority": return queuePriority
        case "completionBlock": return completionBlock
        case "name": return name
        case "qualityOfService": return qualityOfService
        case "threadPriority": return threadPriority
        default: return reflectedValue(of: self, key: key)
        }
    }

    /// Adds `entry`, creating the registry and setting the observed bit.
    final func registerObserver(_ entry: AnyObserverEntry) -> ObservationRegistry {
        let registry = withStateLock { state -> ObservationRegistry in
            state.isObserved = true
            let extras = extrasWhileLocked()
            if let existing = extras.observers { return existing }
            let created = ObservationRegistry()
            extras.observers = created
            return created
        }
        registry.add(entry)
        return registry
    }

    /// Tells observers of `keys` that they are about to change.
    final func notifyWillChange(_ keys: [String]) {
        guard let registry = withStateLock({ _ in extras?.observers }) else { return }
        for key in keys { registry.willChange(key, object: self) }
    }

    /// Tells observers of `keys` that they changed.
    final func notifyDidChange(_ keys: [String]) {
        guard let registry = withStateLock({ _ in extras?.observers }) else { return }
        for key in keys { registry.didChange(key, object: self) }
    }
}
