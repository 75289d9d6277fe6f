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
        if keys.contains("isCancelled") { cancellationWasAnnounced() }
        if keys.contains("isReady") { readinessWasAnnounced() }
        if keys.contains("isFinished") {
            finishIfReportedFinished(announcing: observed ? .isFinished : [])?.run()
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

    /// `key` followed by the lifecycle keys that depend on it (see
    /// `keyPathsForValuesAffectingValue(forKey:)`).
    private func announcedKeys(for key: String) -> [String] {
        let dependents = DependentKeys.keys(affectedBy: key, in: type(of: self))
        return dependents.isEmpty ? [key] : [key] + dependents
    }
}

/// The lifecycle keys that depend on other keys, per class, from
/// `Operation.keyPathsForValuesAffectingValue(forKey:)`.
enum DependentKeys {
    /// The keys whose dependencies are looked up.
    static let lifecycleKeys = ["isReady", "isExecuting", "isFinished", "isCancelled", "isAsynchronous", "isConcurrent"]

    /// Per class: announced key → lifecycle keys it affects.
    private static let cache = LockedValue<[ObjectIdentifier: [String: [String]]]>([:])

    /// The lifecycle keys that announcing `key` also announces for `type`.
    static func keys(affectedBy key: String, in type: Operation.Type) -> [String] {
        table(for: type)[key] ?? []
    }

    /// The keys of `type`'s own that some lifecycle key depends on (`state`
    /// in the usual pattern): every key `keyPathsForValuesAffectingValue`
    /// names, except the lifecycle keys themselves.
    static func ownSourceKeys(in type: Operation.Type) -> [String] {
        table(for: type).keys.filter { !lifecycleKeys.contains($0) }.sorted()
    }

    private static func table(for type: Operation.Type) -> [String: [String]] {
        let id = ObjectIdentifier(type)
        if let known = cache.withLock({ $0[id] }) { return known }
        // The class method is user code: asked outside the lock.
        var inverse: [String: [String]] = [:]
        for lifecycleKey in lifecycleKeys {
            for source in type.keyPathsForValuesAffectingValue(forKey: lifecycleKey) where source != lifecycleKey {
                inverse[source, default: []].append(lifecycleKey)
            }
        }
        cache.withLock { $0[id] = inverse }
        return inverse
    }
}
