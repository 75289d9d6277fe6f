/// How important work is to the user, with Foundation's cases and raw values.
///
/// Operation queues order work across queues by quality of service, and on
/// Linux a worker thread's nice value follows the quality of service of the
/// operation it runs (see the README's "Thread priority" section).
///
/// In a file that also imports Foundation, write
/// `import enum Operations.QualityOfService` to use this type by its name.
public enum QualityOfService: Int, Sendable, CaseIterable, Comparable, CustomStringConvertible {
    /// Work the user is interacting with directly (Foundation: 0x21).
    case userInteractive = 0x21
    /// Work the user started and waits for (Foundation: 0x19).
    case userInitiated = 0x19
    /// Long-running work the user may watch (Foundation: 0x11).
    case utility = 0x11
    /// Work the user does not see (Foundation: 0x09).
    case background = 0x09
    /// No explicit class: inherit from the queue, else between utility and
    /// user-initiated (Foundation: -1).
    case `default` = -1

    /// 0 (background) ... 4 (user-interactive), with `.default` at 2.
    var index: Int {
        switch self {
        case .background: return 0
        case .utility: return 1
        case .default: return 2
        case .userInitiated: return 3
        case .userInteractive: return 4
        }
    }

    init(index: Int) {
        switch index {
        case 0: self = .background
        case 1: self = .utility
        case 3: self = .userInitiated
        case 4: self = .userInteractive
        default: self = .default
        }
    }

    /// Ordered by importance: background < utility < default < user-initiated < user-interactive.
    public static func < (lhs: QualityOfService, rhs: QualityOfService) -> Bool {
        lhs.index < rhs.index
    }

    /// A short human-readable form.
    public var description: String {
        switch self {
        case .userInteractive: return "userInteractive"
        case .userInitiated: return "userInitiated"
        case .utility: return "utility"
        case .background: return "background"
        case .default: return "default"
        }
    }

    /// The nice value a worker thread uses for this class on Linux,
    /// relative to the process's own.
    var niceOffset: Int32 {
        switch self {
        case .userInteractive: return -4
        case .userInitiated: return -2
        case .default: return 0
        case .utility: return 4
        case .background: return 10
        }
    }
}

extension Operation {
    /// The relative order in which a queue starts ready operations
    /// (Foundation's `Operation.QueuePriority`, same raw values).
    ///
    /// Priority orders only operations that are ready and in the same queue;
    /// it never overrides a dependency.
    public enum QueuePriority: Int, Sendable, CaseIterable, Comparable, CustomStringConvertible {
        /// Foundation's `.veryLow` (-8).
        case veryLow = -8
        /// Foundation's `.low` (-4).
        case low = -4
        /// The default (0).
        case normal = 0
        /// Foundation's `.high` (4).
        case high = 4
        /// Foundation's `.veryHigh` (8).
        case veryHigh = 8

        /// 0 (very low) ... 4 (very high).
        var index: Int {
            switch self {
            case .veryLow: return 0
            case .low: return 1
            case .normal: return 2
            case .high: return 3
            case .veryHigh: return 4
            }
        }

        init(index: Int) {
            switch index {
            case 0: self = .veryLow
            case 1: self = .low
            case 3: self = .high
            case 4: self = .veryHigh
            default: self = .normal
            }
        }

        /// The priority for `rawValue`, which may be any value: as on
        /// Darwin, where the type is an imported C enumeration that accepts
        /// every raw value, this never returns nil. A value between the
        /// standard ones is rounded as Darwin's `queuePriority` setter rounds
        /// it: 8 and above is very high, 4 to 7 high, −3 to 3 normal, −7 to
        /// −4 low, −8 and below very low. (Linux Foundation returns nil for
        /// such values, and `QueuePriority(rawValue: 2)!` trapped; probe 48.)
        public init?(rawValue: Int) {
            switch rawValue {
            case 8...: self = .veryHigh
            case 4...: self = .high
            case (-3)...: self = .normal
            case (-7)...: self = .low
            default: self = .veryLow
            }
        }

        /// Ordered by raw value: very low < low < normal < high < very high.
        public static func < (lhs: QueuePriority, rhs: QueuePriority) -> Bool {
            lhs.rawValue < rhs.rawValue
        }

        /// A short human-readable form.
        public var description: String {
            switch self {
            case .veryLow: return "veryLow"
            case .low: return "low"
            case .normal: return "normal"
            case .high: return "high"
            case .veryHigh: return "veryHigh"
            }
        }
    }
}
