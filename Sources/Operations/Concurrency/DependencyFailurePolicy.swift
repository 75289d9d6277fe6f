/// What an operation does when one of its dependencies fails or is
/// cancelled. Chosen per operation with ``Operation/dependencyFailurePolicy``.
public enum DependencyFailurePolicy: Sendable, Hashable {
    /// Run anyway: Foundation's behaviour, and the default. A dependency
    /// that failed or was cancelled still counts as finished.
    case runAnyway
    /// Cancel this operation if a dependency failed: its body threw
    /// (``ResultOperation``), or a failure policy cancelled it because of a
    /// failure further up.
    case cancelIfAnyFailed
    /// Cancel this operation if a dependency failed or was cancelled.
    case cancelIfAnyFailedOrCancelled
}

/// Why a failure policy cancelled an operation: one dependency's failure or
/// cancellation.
public struct DependencyError: Error, Sendable, CustomStringConvertible {
    /// What happened to the dependency.
    public enum Reason: Sendable {
        /// The dependency failed with this error.
        case failed(any Error)
        /// The dependency was cancelled.
        case cancelled
    }

    /// The dependency that failed, was cancelled, or (for a
    /// ``ResultOperation`` input) produced no value.
    public let dependency: Operation
    /// What happened to it.
    public let reason: Reason

    /// A short human-readable form: the dependency and what happened to
    /// it, followed down a chain of propagated failures to the first
    /// operation that failed or was cancelled. A long chain is shortened in
    /// the middle, so the text stays short however long the chain is.
    public var description: String {
        // Iterative, not recursive: a failure propagated along a chain of
        // tens of thousands of operations nests that many errors.
        var links: [String] = []
        var current = self
        var skipped = 0
        while true {
            switch current.reason {
            case .cancelled:
                links.append("\(current.dependency.misuseSubject) was cancelled")
            case .failed(let error):
                if let next = error as? DependencyError {
                    if links.count < Self.leadingLinks {
                        links.append("\(current.dependency.misuseSubject) failed")
                    } else {
                        skipped += 1
                    }
                    current = next
                    continue
                }
                links.append("\(current.dependency.misuseSubject) failed: \(error)")
            }
            break
        }
        if skipped > 0 {
            links.insert("… \(skipped) more …", at: links.count - 1)
        }
        return links.joined(separator: ": ")
    }

    /// How many links of a propagated chain ``description`` names before it
    /// skips to the first failure.
    private static let leadingLinks = 3
}

extension Operation {
    /// What this operation does when a dependency fails or is cancelled.
    ///
    /// The default, `.runAnyway`, is Foundation's: dependents run whatever
    /// happened to their dependencies. With another policy, a matching
    /// dependency cancels this operation before it can start; the reasons
    /// are collected in ``dependencyErrors`` and the first becomes its
    /// ``failure``, so the cancellation propagates along chains of operations
    /// with the same policy.
    public var dependencyFailurePolicy: DependencyFailurePolicy {
        get { withStateLock { _ in extras?.failurePolicy ?? .runAnyway } }
        set {
            withStateLock { state in
                extrasWhileLocked().failurePolicy = newValue
                state.hasFailurePolicy = newValue != .runAnyway
            }
        }
    }

    /// The dependency failures and cancellations that made the failure
    /// policy cancel this operation, in the order they were seen.
    public var dependencyErrors: [DependencyError] {
        withStateLock { _ in extras?.dependencyErrors ?? [] }
    }

    /// The error this operation failed with: the error its body threw (see
    /// ``ResultOperation``), or a ``DependencyError`` when its failure policy
    /// cancelled it. Nil for operations that succeeded, were cancelled
    /// otherwise, or cannot fail.
    public var failure: (any Error)? {
        withStateLock { _ in extras?.failure }
    }

    /// Records that the operation failed with `error` (first failure wins).
    final func recordFailure(_ error: any Error) {
        withStateLock { _ in
            let extras = extrasWhileLocked()
            if extras.failure == nil { extras.failure = error }
        }
    }

    /// Applies the failure policy to finished `dependencies`; cancels the
    /// operation if one of them matches.
    final func applyFailurePolicy(after dependencies: [Operation]) {
        let policy = dependencyFailurePolicy
        guard policy != .runAnyway else { return }
        var reasons: [DependencyError] = []
        for dependency in dependencies where dependency.loadState().isFinished {
            if let error = dependency.failure {
                reasons.append(DependencyError(dependency: dependency, reason: .failed(error)))
            } else if policy == .cancelIfAnyFailedOrCancelled, dependency.isCancelled {
                reasons.append(DependencyError(dependency: dependency, reason: .cancelled))
            }
        }
        guard !reasons.isEmpty else { return }
        let isNew = withStateLock { state -> Bool in
            guard state.countsDependencies else { return false }
            let extras = extrasWhileLocked()
            let known = Set(extras.dependencyErrors.map { ObjectIdentifier($0.dependency) })
            let fresh = reasons.filter { !known.contains(ObjectIdentifier($0.dependency)) }
            extras.dependencyErrors += fresh
            if extras.failure == nil, let first = fresh.first { extras.failure = first }
            return !fresh.isEmpty
        }
        if isNew { cancel() }
    }
}
