import Operations
import Synchronization

/// Observes the four lifecycle keys of operations — `isReady`,
/// `isCancelled`, `isExecuting`, `isFinished` — with `[.old, .new]`, as
/// the state-sequences article's `addObserverForOperation:keyPathes:` does, and records each
/// change in a ``DemoLog`` as `name key OLD→NEW`.
///
/// Keep the recorder alive while the operations run; ``stop()`` ends the
/// observations.
final class StateRecorder: Sendable {
    // Sendable: `tokens` is a Mutex; `log` is Sendable.
    private let log: DemoLog
    private let tokens = Mutex<[KeyValueObservation]>([])

    init(log: DemoLog) {
        self.log = log
    }

    /// Names the operation `name` if it has no name yet, prints its four
    /// values (the state-sequences article's `logOperation:keyPathes:`) unless told not to, then
    /// observes them. Call it before the operation is queued or started. Returns the four values
    /// (isReady, isCancelled, isExecuting, isFinished) read before observing.
    @discardableResult
    func watch<Op: Operation>(_ operation: Op, as name: String, printInitialValues: Bool = true) -> [Bool] {
        if operation.name == nil { operation.name = name }
        let initial = [operation.isReady, operation.isCancelled, operation.isExecuting, operation.isFinished]
        if printInitialValues {
            log.note("\(name) isReady = \(yesNo(initial[0]))")
            log.note("\(name) isCancelled = \(yesNo(initial[1]))")
            log.note("\(name) isExecuting = \(yesNo(initial[2]))")
            log.note("\(name) isFinished = \(yesNo(initial[3]))")
        }
        let log = self.log
        let observed: [KeyValueObservation] = [
            operation.observe(\.isReady, options: [.old, .new]) { _, change in
                log.stateChange("\(name) isReady \(yesNo(change.oldValue))→\(yesNo(change.newValue))")
            },
            operation.observe(\.isCancelled, options: [.old, .new]) { _, change in
                log.stateChange("\(name) isCancelled \(yesNo(change.oldValue))→\(yesNo(change.newValue))")
            },
            operation.observe(\.isExecuting, options: [.old, .new]) { _, change in
                log.stateChange("\(name) isExecuting \(yesNo(change.oldValue))→\(yesNo(change.newValue))")
            },
            operation.observe(\.isFinished, options: [.old, .new]) { _, change in
                log.stateChange("\(name) isFinished \(yesNo(change.oldValue))→\(yesNo(change.newValue))")
            },
        ]
        tokens.withLock { $0.append(contentsOf: observed) }
        return initial
    }

    /// Checks the four values ``watch(_:as:printInitialValues:)`` returned
    /// for a fresh operation: ready, and nothing else.
    @discardableResult
    func checkFresh(_ values: [Bool], as name: String) -> Bool {
        log.check(
            values == [true, false, false, false],
            "\(name) starts ready, not cancelled, not executing, not finished",
            detail: "isReady/isCancelled/isExecuting/isFinished = \(values.map(yesNo).joined(separator: "/"))"
        )
    }

    /// Ends every observation.
    func stop() {
        let ended = tokens.withLock { tokens -> [KeyValueObservation] in
            defer { tokens = [] }
            return tokens
        }
        for token in ended { token.invalidate() }
    }
}
