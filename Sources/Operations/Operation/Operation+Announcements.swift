// Announcements from subclasses (`willChangeValue(forKey:)` /
// `didChangeValue(forKey:)`): notifications for observers, and the moments
// at which the library re-reads the getters it relies on.

extension Operation {
    final func handleWillChange(_ key: String) {
        guard loadState().isObserved else { return }
        let keys = announcedKeys(for: key)
        withThreadContext { notifyWillChange(keys) }
    }

    final func handleDidChange(_ key: String) {
        withThreadContext { didChange(announcedKeys(for: key)) }
    }

    private func didChange(_ keys: [String]) {
        let observed = loadState().isObserved
        // Observers first, except for `isFinished`: its observers are told
        // after the operation has left its queue (the retirement path).
        if observed {
            let others = keys.filter { $0 != "isFinished" }
            if !others.isEmpty { notifyDidChange(others) }
        }
        // The library acts on the property's name as on its key, as
        // Foundation's operation does ("finished" for "isFinished", and so
        // on: a hand-written operation that announces `finished` leaves its
        // queue there too). Observers hear the key that was announced.
        if keys.contains("isCancelled") || keys.contains("cancelled") { cancellationWasAnnounced() }
        if keys.contains("isReady") || keys.contains("ready") { readinessWasAnnounced() }
        if keys.contains("isFinished") {
            finishIfReportedFinished(announcing: observed ? .isFinished : [])?.run()
        } else if keys.contains("finished") {
            finishIfReportedFinished(announcing: [])?.run()
        }
    }

    /// A subclass announced `isReady`: its queue re-reads it. An operation
    /// in no queue whose class overrides `isReady` has the getter read
    /// once, as Foundation's operation reads it when told of the change:
    /// a getter may do work when read (evaluate conditions, move a state
    /// machine on), and ported code announces `isReady` to get that done
    /// before anything is queued (Overdrive's tests rely on it).
    private func readinessWasAnnounced() {
        let (queue, pending) = withStateLock { state in (queueForNews(state), !state.isFinished && !state.hasBaseStarted) }
        if let queue {
            queue.memberReadinessMayHaveChanged(self)
        } else if pending, overrides(.isReady) {
            _ = isReady
        }
    }

    /// `key` followed by the keys that depend on it, directly or through
    /// other keys (see `keyPathsForValuesAffectingValue(forKey:)`), as
    /// Foundation's KVO follows them: the lifecycle keys, which the library
    /// acts on, and, while the operation is observed, the other keys its
    /// observers registered by name.
    private func announcedKeys(for key: String) -> [String] {
        let type = type(of: self)
        var keys = [key] + DependentKeys.keys(affectedBy: key, in: type)
        guard loadState().isObserved, let registry = withStateLock({ _ in extras?.observers }) else { return keys }
        for observed in registry.observedKeys() where !keys.contains(observed) && !DependentKeys.lifecycleKeys.contains(observed) {
            if DependentKeys.closure(of: observed, in: type).contains(key) { keys.append(observed) }
        }
        return keys
    }
}

/// The keys that depend on other keys, per class, from
/// `Operation.keyPathsForValuesAffectingValue(forKey:)`, followed through
/// every level (a key that depends on a key that depends on `k` depends on
/// `k`), as Foundation's KVO follows them.
enum DependentKeys {
    /// The keys whose dependencies are looked up: the lifecycle keys, and
    /// the property names the library also acts on (`finished` for
    /// `isFinished`, and so on), as Foundation's operation does.
    static let lifecycleKeys = isKeys + ["ready", "executing", "finished", "cancelled"]

    /// The lifecycle keys proper.
    static let isKeys = ["isReady", "isExecuting", "isFinished", "isCancelled", "isAsynchronous", "isConcurrent"]

    /// Per class: announced key → lifecycle keys it affects.
    private static let cache = LockedValue<[ObjectIdentifier: [String: [String]]]>([:])
    /// Per class: key → every key it depends on, through every level.
    private static let closures = LockedValue<[ObjectIdentifier: [String: Set<String>]]>([:])

    /// The lifecycle keys that announcing `key` also announces for `type`.
    static func keys(affectedBy key: String, in type: Operation.Type) -> [String] {
        table(for: type)[key] ?? []
    }

    /// The keys of `type`'s own that some lifecycle key depends on (`state`
    /// in the usual pattern): every key `keyPathsForValuesAffectingValue`
    /// names, at any level, except the lifecycle keys themselves.
    static func ownSourceKeys(in type: Operation.Type) -> [String] {
        // A property named like one (`finished`) may be the class's own,
        // on which `isFinished` depends: it stays a source.
        table(for: type).keys.filter { !isKeys.contains($0) }.sorted()
    }

    /// Every key that `key` depends on for `type`, through every level,
    /// without `key` itself. Call with no lock held: it asks the class
    /// method, which is user code (once per class and key).
    static func closure(of key: String, in type: Operation.Type) -> Set<String> {
        let id = ObjectIdentifier(type)
        if let known = closures.withLock({ $0[id]?[key] }) { return known }
        var found: Set<String> = []
        var pending = [key]
        while let next = pending.popLast() {
            for source in type.keyPathsForValuesAffectingValue(forKey: next) where source != key && found.insert(source).inserted {
                pending.append(source)
            }
        }
        closures.withLock { $0[id, default: [:]][key] = found }
        return found
    }

    private static func table(for type: Operation.Type) -> [String: [String]] {
        let id = ObjectIdentifier(type)
        if let known = cache.withLock({ $0[id] }) { return known }
        var inverse: [String: [String]] = [:]
        for lifecycleKey in lifecycleKeys {
            for source in closure(of: lifecycleKey, in: type).sorted() {
                inverse[source, default: []].append(lifecycleKey)
            }
        }
        cache.withLock { $0[id] = inverse }
        return inverse
    }
}
