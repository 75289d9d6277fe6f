// Foundation's `OperationQueue.progress`, for code that also uses
// Foundation's `Progress`.
//
// The core module does not import Foundation, so this module adds the
// property. It installs a reporter on the queue the first time `progress` is
// read (see `OperationQueue+ProgressHook.swift` in the core); from then on
// the base `start()` of each of the queue's operations runs its body inside
// the reporter, which does nothing until the progress's `totalUnitCount` is
// set, as on Darwin.

import class Foundation.Progress
@_spi(Integrations) import Operations
import Synchronization

extension OperationQueue {
    /// The progress of the operations the queue runs, as Foundation's
    /// `OperationQueue.progress`.
    ///
    /// The queue reports no progress until you set the progress's
    /// `totalUnitCount`. From then on, each operation that the queue starts
    /// through the base `start()` (a `BlockOperation`, a subclass that
    /// overrides `main()`, or one whose own `start()` calls `super.start()`)
    /// adds one unit to the progress when its `main()` returns. A
    /// `Progress` created inside `main()` with `Progress(totalUnitCount:)`
    /// becomes that unit's child, so its own completion is reported
    /// instead. Operations that override `start()` without calling
    /// `super.start()`, barrier blocks, and cancelled operations (whose
    /// `main()` never runs) add nothing: lower `totalUnitCount` for them, or
    /// add their own progress with `addChild(_:withPendingUnitCount:)`.
    ///
    /// The same `Progress` is returned every time, for the queue's lifetime.
    ///
    /// ```swift
    /// import class Foundation.Progress
    /// import class Operations.OperationQueue
    /// import OperationsFoundation
    ///
    /// let queue = OperationQueue()
    /// queue.progress.totalUnitCount = 3
    /// for _ in 0..<3 { queue.addOperation { /* work */ } }
    /// queue.waitUntilAllOperationsAreFinished()
    /// // queue.progress.fractionCompleted == 1.0
    /// ```
    ///
    /// On Linux, Foundation's `Progress` does not synchronize its own state:
    /// the queue serializes the updates it makes, but code that changes the
    /// queue's progress (or the children it adds) from several threads at
    /// once must synchronize those changes itself.
    public var progress: Progress {
        let reporter = progressReporter(installingIfAbsent: { QueueProgressReporter() })
        // Only this module installs reporters (the hook is SPI), and it
        // installs only `QueueProgressReporter`s.
        return (reporter as! QueueProgressReporter).progress
    }
}

/// A queue's progress: Foundation's `Progress`, which switches the queue's
/// reporting on when its `totalUnitCount` is first set, as on Darwin.
final class QueueProgress: Progress, @unchecked Sendable {
    // @unchecked Sendable: as its superclass; `reporting` is atomic.

    /// Whether `totalUnitCount` was set.
    let reporting = Atomic<Bool>(false)

    init() {
        super.init(parent: nil, userInfo: nil)
    }

    override var totalUnitCount: Int64 {
        get { super.totalUnitCount }
        set {
            super.totalUnitCount = newValue
            reporting.store(true, ordering: .releasing)
        }
    }
}

/// The reporter installed on a queue by ``OperationQueue/progress``.
final class QueueProgressReporter: OperationQueueProgressReporter, @unchecked Sendable {
    // @unchecked Sendable: `progress` is immutable and thread-safe on Darwin;
    // on Linux, `updates` serializes the changes this reporter makes to it.

    let progress = QueueProgress()
    /// Serializes the reporter's own changes to `progress` (Linux's
    /// `Progress` has no lock of its own). It guards no library state, and
    /// on Linux no user code runs inside it (Linux's `Progress` has no
    /// key-value observing); on Darwin it is not taken.
    private let updates = Mutex<Void>(())

    func run(_ operation: Operation, body: () -> Void) {
        guard progress.reporting.load(ordering: .acquiring) else { return body() }
        let unit = Progress(parent: nil, userInfo: nil)
        unit.totalUnitCount = 1
        serialized { progress.addChild(unit, withPendingUnitCount: 1) }
        // Current while the body runs: a `Progress(totalUnitCount:)` made
        // inside becomes the unit's child. If none is, resigning completes
        // the unit.
        unit.becomeCurrent(withPendingUnitCount: 1)
        body()
        serialized { unit.resignCurrent() }
    }

    private func serialized(_ change: () -> Void) {
        #if canImport(Darwin)
        change()
        #else
        updates.withLock { _ in change() }
        #endif
    }
}
