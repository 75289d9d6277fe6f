extension OperationQueue: KeyValueObservable, ObservationHost {}

extension KeyValueObservable where Self: OperationQueue {
    /// Observes a property of the queue, like Foundation's
    /// `NSObject.observe(_:options:changeHandler:)`.
    ///
    /// The queue reports `operations`, `operationCount`, `isSuspended`,
    /// `maxConcurrentOperationCount`, `name`, `qualityOfService`,
    /// `underlyingQueue` and `progress`. `operations` and `operationCount`
    /// change whenever operations are added or finish; observing them costs
    /// a notification per change. Notifications arrive on the thread that
    /// made the change, never while the queue's lock is held. Changes made
    /// at once on several threads (adds on one, finishes on others) are
    /// each reported with the old value read when that change began, as
    /// Foundation keeps pending changes per thread.
    ///
    /// A wait for the queue (``OperationQueue/waitUntilAllOperationsAreFinished()``,
    /// ``OperationQueue/drained()``) does not wait for these notifications:
    /// it can return while the thread that retired the last operation is
    /// still telling observers that `operationCount` became 0. To act on the
    /// count reaching 0, do it in the handler, or wait for the handler (the
    /// queue's operations' own `isFinished` observers, by contrast, have run
    /// when the wait returns; their completion blocks may not have).
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

    /// Observes a key by name, as ``Operation`` allows: for code ported from
    /// key-value observing by string (`"operationCount"`, `"operations"`,
    /// `"isSuspended"`, …). The queue's own keys are read from its
    /// properties; any other key by reflection from a stored property named
    /// `key` (or `_key`), or nil.
    ///
    /// - Returns: A token; observation ends when it is invalidated or released.
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

    static func observationKey<Value>(for keyPath: KeyPath<Self, Value>) -> String? {
        ObservedKeyNames.name(of: keyPath, in: Self.self) {
            [
                (\Self.operations, "operations"),
                (\Self.operationCount, "operationCount"),
                (\Self.isSuspended, "isSuspended"),
                (\Self.maxConcurrentOperationCount, "maxConcurrentOperationCount"),
                (\Self.name, "name"),
                (\Self.qualityOfService, "qualityOfService"),
                (\Self.underlyingQueue, "underlyingQueue"),
                (\Self.progress, "progress"),
            ]
        }
    }
}

extension OperationQueue {
    /// The value observed under `key` (see `observe(key:options:changeHandler:)`).
    final func valueForObservedKey(_ key: String) -> Any? {
        switch key {
        case "operations": return operations
        case "operationCount": return operationCount
        case "isSuspended": return isSuspended
        case "maxConcurrentOperationCount": return maxConcurrentOperationCount
        case "name": return name
        case "qualityOfService": return qualityOfService
        case "underlyingQueue": return underlyingQueue
        case "progress": return progress
        default: return reflectedValue(of: self, key: key)
        }
    }

    final func registerObserver(_ entry: AnyObserverEntry) -> ObservationRegistry {
        let registry = lock.withLock { () -> ObservationRegistry in
            if let observers { return observers }
            let created = ObservationRegistry()
            observers = created
            return created
        }
        registry.add(entry)
        observed.store(true, ordering: .releasing)
        return registry
    }

    final func notifyWillChange(_ keys: [String]) {
        guard observed.load(ordering: .acquiring), let registry = lock.withLock({ observers }) else { return }
        for key in keys { registry.willChange(key, object: self) }
    }

    final func notifyDidChange(_ keys: [String]) {
        guard observed.load(ordering: .acquiring), let registry = lock.withLock({ observers }) else { return }
        for key in keys { registry.didChange(key, object: self) }
    }
}
