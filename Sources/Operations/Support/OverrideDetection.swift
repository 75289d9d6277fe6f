/// Which of `Operation`'s overridable members a class overrides.
///
/// Foundation lets a subclass replace `start()`, `cancel()`, `isReady`,
/// `isExecuting` and `isFinished`, and the queue must then act on what those
/// members do and return. The library needs to know *whether* a class
/// overrides one of them, for three reasons:
/// - an overridden getter is user code, which must never run under a library
///   lock, while the base getter is a plain atomic load that may;
/// - a cancelled operation whose class keeps the base `start()` can be
///   retired without a concurrency slot, because no user code can observe the
///   difference, while one that overrides `start()` must be started in its
///   turn;
/// - `cancelAllOperations()` cancels the operations whose class keeps the
///   base `cancel()` in one batch (one queue lock for all of them), and calls
///   an overridden `cancel()` one operation at a time;
/// - the base `isAsynchronous` answers with an overridden `isConcurrent`,
///   and the base `isConcurrent` with `isAsynchronous`, without ever
///   calling each other back and forth.
///
/// ## How
/// Swift keeps a class's overridable members in a table inside its type
/// metadata; a subclass's table starts with its superclass's entries, at the
/// same positions, and an override replaces its entry. Which position holds
/// which member is not published, so it is found by experiment, once: for
/// each member, a private subclass that overrides only that member is compared
/// with one that overrides nothing; the single entry that differs is the
/// member's. A class overrides the member when its entry differs from
/// `Operation`'s. Checking it costs two dependent loads.
///
/// The experiment validates itself (exactly one entry must differ per probe,
/// and the probes must agree with each other). If it does not — a runtime
/// whose metadata differs from what is expected, or signed table entries —
/// every member is treated as overridden: the library then always asks the
/// getters (outside its locks) and starts cancelled operations in their
/// turn, which is correct for every class and merely slower.
enum OverrideDetection {
    /// The members whose overriding matters. Raw values index `slots`.
    enum Member: Int, CaseIterable, Sendable {
        case start
        case isReady
        case isExecuting
        case isFinished
        case cancel
        case isAsynchronous
        case isConcurrent
    }

    /// Word offsets of the members' table entries in class metadata, and
    /// `Operation`'s entries there, in a fixed layout (no reference counting
    /// on the hot path); `isPrecise` false when the experiment failed.
    private struct Table: Sendable {
        var isPrecise = false
        var slots: (Int, Int, Int, Int, Int, Int, Int) = (0, 0, 0, 0, 0, 0, 0)
        var baseEntries: (UInt, UInt, UInt, UInt, UInt, UInt, UInt) = (0, 0, 0, 0, 0, 0, 0)

        @inline(__always)
        func slot(_ member: Member) -> (offset: Int, base: UInt) {
            switch member {
            case .start: return (slots.0, baseEntries.0)
            case .isReady: return (slots.1, baseEntries.1)
            case .isExecuting: return (slots.2, baseEntries.2)
            case .isFinished: return (slots.3, baseEntries.3)
            case .cancel: return (slots.4, baseEntries.4)
            case .isAsynchronous: return (slots.5, baseEntries.5)
            case .isConcurrent: return (slots.6, baseEntries.6)
            }
        }
    }

    private static let table: Table = measure() ?? Table()

    /// Whether overrides can be told apart on this runtime (false means every
    /// member is treated as overridden).
    static var isPrecise: Bool { table.isPrecise }

    /// Whether the class of `operation` overrides `member`.
    @inline(__always)
    static func overrides(_ operation: Operation, _ member: Member) -> Bool {
        let table = table
        guard table.isPrecise else { return true }
        let (offset, base) = table.slot(member)
        let metadata = metadataPointer(of: operation)
        return metadata.load(fromByteOffset: offset &* MemoryLayout<UInt>.size, as: UInt.self) != base
    }

    /// Whether the class `type` overrides `member`.
    static func overrides(_ type: Operation.Type, _ member: Member) -> Bool {
        let table = table
        guard table.isPrecise else { return true }
        let (offset, base) = table.slot(member)
        let metadata = unsafeBitCast(type, to: UnsafeRawPointer.self)
        return metadata.load(fromByteOffset: offset &* MemoryLayout<UInt>.size, as: UInt.self) != base
    }

    /// The type metadata of an object: the first word of every Swift object.
    @inline(__always)
    private static func metadataPointer(of object: AnyObject) -> UnsafeRawPointer {
        UnsafeRawPointer(Unmanaged.passUnretained(object).toOpaque()).load(as: UnsafeRawPointer.self)
    }

    // MARK: The experiment

    /// The number of metadata words that `Operation`'s metadata spans from its
    /// address point: the range in which its table entries live.
    private static func wordCount(of type: AnyClass) -> Int? {
        let metadata = unsafeBitCast(type, to: UnsafeRawPointer.self)
        // Class metadata (Swift ABI): after the kind word and the superclass
        // come, with Objective-C interoperability, two cache words and a data
        // word; then flags (32 bits), instance address point (32), instance
        // size (32), alignment mask (16), reserved (16), class size (32) and
        // class address point (32).
        #if canImport(ObjectiveC)
        let sizeWord = 7
        #else
        let sizeWord = 4
        #endif
        let classSize = metadata.load(fromByteOffset: sizeWord * 8, as: UInt32.self)
        let addressPoint = metadata.load(fromByteOffset: sizeWord * 8 + 4, as: UInt32.self)
        guard MemoryLayout<UInt>.size == 8, classSize > addressPoint, classSize < 1 << 16 else { return nil }
        return Int(classSize - addressPoint) / 8
    }

    private static func words(of type: AnyClass, count: Int) -> [UInt] {
        let metadata = unsafeBitCast(type, to: UnsafeRawPointer.self)
        return (0..<count).map { metadata.load(fromByteOffset: $0 * 8, as: UInt.self) }
    }

    private static func measure() -> Table? {
        guard let count = wordCount(of: Operation.self),
              wordCount(of: ProbeNothing.self) == count else { return nil }
        let base = words(of: Operation.self, count: count)
        let nothing = words(of: ProbeNothing.self, count: count)
        let probes: [(Member, AnyClass)] = [
            (.start, ProbeStart.self),
            (.isReady, ProbeIsReady.self),
            (.isExecuting, ProbeIsExecuting.self),
            (.isFinished, ProbeIsFinished.self),
            (.cancel, ProbeCancel.self),
            (.isAsynchronous, ProbeIsAsynchronous.self),
            (.isConcurrent, ProbeIsConcurrent.self),
        ]
        var slots = [Int](repeating: -1, count: Member.allCases.count)
        for (member, probe): (Member, AnyClass) in probes {
            guard wordCount(of: probe) == count else { return nil }
            let probeWords = words(of: probe, count: count)
            let differing = (0..<count).filter { probeWords[$0] != nothing[$0] }
            // The probe's own type descriptor differs as well; the member's
            // entry is the one that also differs from `Operation`'s while the
            // do-nothing probe's equals it.
            let candidates = differing.filter { nothing[$0] == base[$0] }
            guard candidates.count == 1 else { return nil }
            slots[member.rawValue] = candidates[0]
        }
        guard Set(slots).count == slots.count else { return nil }
        // Cross-check: every probe keeps the other members' entries.
        for (member, probe): (Member, AnyClass) in probes {
            let probeWords = words(of: probe, count: count)
            for other in Member.allCases where other != member {
                guard probeWords[slots[other.rawValue]] == base[slots[other.rawValue]] else { return nil }
            }
        }
        return Table(
            isPrecise: true,
            slots: (slots[0], slots[1], slots[2], slots[3], slots[4], slots[5], slots[6]),
            baseEntries: (
                base[slots[0]], base[slots[1]], base[slots[2]], base[slots[3]],
                base[slots[4]], base[slots[5]], base[slots[6]]
            )
        )
    }
}

// The probes: each overrides one member and is never instantiated.
// `@unchecked Sendable` restates the base class's conformance; they have no state.
private final class ProbeNothing: Operation, @unchecked Sendable {}
private final class ProbeStart: Operation, @unchecked Sendable {
    override func start() {}
}
private final class ProbeIsReady: Operation, @unchecked Sendable {
    override var isReady: Bool { true }
}
private final class ProbeIsExecuting: Operation, @unchecked Sendable {
    override var isExecuting: Bool { false }
}
private final class ProbeIsFinished: Operation, @unchecked Sendable {
    override var isFinished: Bool { false }
}
private final class ProbeCancel: Operation, @unchecked Sendable {
    override func cancel() {}
}
private final class ProbeIsAsynchronous: Operation, @unchecked Sendable {
    override var isAsynchronous: Bool { false }
}
private final class ProbeIsConcurrent: Operation, @unchecked Sendable {
    override var isConcurrent: Bool { false }
}
