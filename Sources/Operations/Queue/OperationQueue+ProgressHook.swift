// The hook behind Foundation's `OperationQueue.progress`.
//
// The core library does not import Foundation, so it has no `Progress`. The
// `OperationsFoundation` module adds `progress` to `OperationQueue` and
// installs, per queue, a reporter through this hook. When a queue has one,
// the base `start()` of each of its operations (not its barriers) runs the
// body inside the reporter's `run`, which, once reporting is switched on,
// makes a one-unit child of the queue's progress current around the body:
// as on Darwin, an operation contributes one unit when its `main()` returns,
// and one that overrides `start()` without calling `super.start()`
// contributes nothing.
//
// The hot path pays one relaxed load (`ProgressHook.isInstalled`) per
// operation until a reporter is installed anywhere in the process; after
// that, a queue without one pays a second relaxed load (its own flag) for
// the operations its drain loops start, and one operation lock for those a
// class's own `start()` hands to `super.start()` (probe 47: reading the
// reporter under the queue's lock for every operation of every queue cost
// up to 2.5 times as much per operation).

import Synchronization

/// A queue's participation in progress reporting, installed by the
/// `OperationsFoundation` module. Not for use outside this package's
/// modules.
@_spi(Integrations)
public protocol OperationQueueProgressReporter: AnyObject, Sendable {
    /// Runs `body`, the body of `operation` run by the base `start()` for
    /// the queue the reporter is installed on, on the calling thread.
    /// Called with no library lock held; must call `body` exactly once.
    func run(_ operation: Operation, body: () -> Void)
}

/// Whether any queue of the process has had a progress reporter installed.
enum ProgressHook {
    static let installed = Atomic<Bool>(false)

    @inline(__always)
    static var isInstalled: Bool { installed.load(ordering: .relaxed) }
}

extension OperationQueue {
    /// The queue's progress reporter, installing the one `make` returns if
    /// it has none yet. `make` runs with no lock held; if another thread
    /// installed one meanwhile, that one is returned and `make`'s result is
    /// dropped.
    @_spi(Integrations)
    public final func progressReporter(
        installingIfAbsent make: () -> any OperationQueueProgressReporter
    ) -> any OperationQueueProgressReporter {
        if let existing = lock.withLock({ storedProgressReporter }) { return existing }
        let made = make()
        let installed = lock.withLock { () -> any OperationQueueProgressReporter in
            if let existing = storedProgressReporter { return existing }
            storedProgressReporter = made
            return made
        }
        hasProgressReporter.store(true, ordering: .releasing)
        ProgressHook.installed.store(true, ordering: .relaxed)
        // If another thread won, `made` is released here, after unlocking.
        return installed
    }

    /// The installed reporter, if any.
    final var installedProgressReporter: (any OperationQueueProgressReporter)? {
        guard hasProgressReporter.load(ordering: .acquiring) else { return nil }
        return lock.withLock { storedProgressReporter }
    }
}

extension Operation {
    /// Runs the body for the base `start()`, inside the owning queue's
    /// progress reporter when it has one (see the file's header). Barriers
    /// and operations started by hand run it as is. `owner` is the queue
    /// whose drain loop starts the operation, when known.
    final func runBodyReportingProgress(owner: OperationQueue?) -> BodyOutcome {
        if let owner, !owner.hasProgressReporter.load(ordering: .relaxed) { return runBody() }
        guard !(self is BarrierOperation),
              let queue = owner ?? withStateLock({ state in queueForNews(state) }),
              let reporter = queue.installedProgressReporter else {
            return runBody()
        }
        var outcome = BodyOutcome.finished
        reporter.run(self) { outcome = runBody() }
        return outcome
    }
}
