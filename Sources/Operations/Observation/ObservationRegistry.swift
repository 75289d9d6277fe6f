/// The observers of one object, and delivery of will/did notifications.
///
/// Each entry observes one key, or (for a key path the library cannot name)
/// is re-evaluated on every announced change. Delivery happens on the thread
/// that announces the change, after every library lock is released.
final class ObservationRegistry: @unchecked Sendable {
    // @unchecked Sendable: `entries` is read and written only while `lock`
    // is held; notifications work on a snapshot taken under the lock.
    private let lock = PlatformLock()
    private var entries: [AnyObserverEntry] = []
    /// Run once when the observed object is deinitialized.
    private var ownerEndHandlers = CallbackList()

    /// Registers `handler` to run once when the observed object is
    /// deinitialized (an observation stream ends then). Returns the key
    /// that removes it (`removeOwnerHandler`).
    func onOwnerDeinitialized(_ handler: @escaping @Sendable () -> Void) -> Int {
        lock.withLock { ownerEndHandlers.add(handler) }
    }

    /// Removes a handler registered with `onOwnerDeinitialized` (its stream
    /// ended first); released after unlocking.
    func removeOwnerHandler(_ key: Int) {
        let removed = lock.withLock { ownerEndHandlers.remove(key) }
        withExtendedLifetime(removed) {}
    }

    /// The observed object is being deinitialized: runs the handlers, after
    /// releasing the lock. Called from the object's `deinit`.
    func ownerDeinitialized() {
        let handlers = lock.withLock { ownerEndHandlers.takeAll() }
        for handler in handlers { handler() }
    }

    func add(_ entry: AnyObserverEntry) {
        lock.withLock { entries.append(entry) }
    }

    func remove(_ entry: AnyObserverEntry) {
        lock.withLock { entries.removeAll { $0 === entry } }
    }

    var isEmpty: Bool { lock.withLock { entries.isEmpty } }

    /// The keys observers registered by name (each once).
    func observedKeys() -> [String] {
        lock.withLock {
            var keys: [String] = []
            for entry in entries { if let key = entry.key, !keys.contains(key) { keys.append(key) } }
            return keys
        }
    }

    private func snapshot(for key: String) -> [AnyObserverEntry] {
        lock.withLock { entries.filter { $0.key == nil || $0.key == key } }
    }

    func willChange(_ key: String, object: AnyObject) {
        for entry in snapshot(for: key) where entry.isValid { entry.willChange(object) }
    }

    func didChange(_ key: String, object: AnyObject) {
        for entry in snapshot(for: key) where entry.isValid { entry.didChange(object) }
    }
}

/// A type-erased observer.
class AnyObserverEntry: @unchecked Sendable {
    // @unchecked Sendable: `key` is immutable; `valid` is only changed
    // through `invalidate()` while `stateLock` is held, and subclasses
    // guard their own mutable state with `stateLock` too.
    let key: String?
    let stateLock = PlatformLock()
    private var valid = true

    init(key: String?) { self.key = key }

    var isValid: Bool { stateLock.withLock { valid } }
    func invalidate() { stateLock.withLock { valid = false } }

    func willChange(_ object: AnyObject) {}
    func didChange(_ object: AnyObject) {}
}

/// An observer of one value of `Root`, read with `read`.
final class ObserverEntry<Root: AnyObject, Value>: AnyObserverEntry, @unchecked Sendable {
    // @unchecked Sendable: `read` captures only a key path or a key string;
    // `pendingOld`, `lastValue` and `readingThreads` are guarded by `stateLock`.
    private let options: ObservationOptions
    private let read: (Root) -> Value
    private let handler: @Sendable (Root, ObservedChange<Value>) -> Void
    /// The old values read by will-changes whose did-change has not come
    /// yet, each with the thread that announced it. As in Foundation's KVO,
    /// a did-change takes the newest value its own thread recorded: changes
    /// announced at once on several threads (a queue's `operationCount`
    /// while operations finish) or nested on one thread each get their own
    /// old value. One slot shared by all threads lost some of them. A
    /// did-change on a thread that recorded none (its will-change came
    /// before the observer registered, or on another thread) reports no old
    /// value: taking another thread's would give that thread the wrong one.
    private var pendingOld: [(thread: UInt, value: Value)] = []
    private var lastValue: Value?
    /// Threads reading the value of an unnamed key path for this observer
    /// (see `didChange`).
    private var readingThreads: [UInt] = []
    /// Pending old values kept at most per thread: a will-change never
    /// followed by its did-change (a subclass's mistake) must not grow the
    /// list forever, and evicts only its own thread's oldest value.
    private static var pendingLimitPerThread: Int { 64 }

    init(
        key: String?,
        options: ObservationOptions,
        read: @escaping (Root) -> Value,
        handler: @escaping @Sendable (Root, ObservedChange<Value>) -> Void
    ) {
        self.options = options
        self.read = read
        self.handler = handler
        super.init(key: key)
    }

    /// Records the current value for change detection (derived entries) and
    /// delivers the `.initial` notification if requested.
    func start(on root: Root) {
        // An unnamed key path's getter that announces a key while it is
        // first read must not be taken for a change (see `didChange`).
        let value: Value
        if key == nil, let guarded = guardedRead(root) {
            value = guarded
        } else {
            value = read(root)
        }
        // A value recorded meanwhile (a concurrent change) may hold user
        // objects: released after unlocking.
        let replaced: Value? = stateLock.withLock {
            let previous = lastValue
            lastValue = value
            return previous
        }
        withExtendedLifetime(replaced) {}
        if options.contains(.initial) {
            handler(root, ObservedChange(newValue: options.contains(.new) ? value : nil, oldValue: nil, isPrior: false))
        }
    }

    override func willChange(_ object: AnyObject) {
        guard key != nil, let root = object as? Root else { return }
        guard options.contains(.old) || options.contains(.prior) else { return }
        let old = read(root)
        let thread = Platform.currentThreadToken()
        // A dropped value may hold operations: released after unlocking.
        let dropped: (thread: UInt, value: Value)? = stateLock.withLock {
            var dropped: (thread: UInt, value: Value)?
            if pendingOld.count >= Self.pendingLimitPerThread,
               pendingOld.lazy.filter({ $0.thread == thread }).count >= Self.pendingLimitPerThread,
               let oldest = pendingOld.firstIndex(where: { $0.thread == thread }) {
                dropped = pendingOld.remove(at: oldest)
            }
            pendingOld.append((thread, old))
            return dropped
        }
        withExtendedLifetime(dropped) {}
        if options.contains(.prior) {
            handler(root, ObservedChange(newValue: nil, oldValue: options.contains(.old) ? old : nil, isPrior: true))
        }
    }

    /// Reads the value with the getter, marking this thread as reading it
    /// for this observer meanwhile; nil, without reading, when the thread
    /// already is (the getter itself announced a key). The getter runs
    /// with no lock held.
    private func guardedRead(_ root: Root) -> Value? {
        let thread = Platform.currentThreadToken()
        let entered = stateLock.withLock { () -> Bool in
            guard !readingThreads.contains(thread) else { return false }
            readingThreads.append(thread)
            return true
        }
        guard entered else { return nil }
        defer {
            stateLock.withLock {
                if let index = readingThreads.firstIndex(of: thread) { readingThreads.remove(at: index) }
            }
        }
        return read(root)
    }

    override func didChange(_ object: AnyObject) {
        guard let root = object as? Root else { return }
        if key == nil {
            // A key path the library cannot name: report it when an
            // announced change altered its value. Its getter is read on
            // every announcement of any key; a getter that announces a key
            // itself would start the read again, forever (probe 41): a
            // thread already reading it for this observer skips the nested
            // announcement (Foundation would not tell this observer of an
            // unrelated key at all).
            guard let new = guardedRead(root) else { return }
            let old: Value? = stateLock.withLock {
                let previous = lastValue
                lastValue = new
                return previous
            }
            guard !valuesEqual(old, new) else { return }
            handler(root, ObservedChange(
                newValue: options.contains(.new) ? new : nil,
                oldValue: options.contains(.old) ? old : nil,
                isPrior: false
            ))
            return
        }
        let new = read(root)
        let thread = Platform.currentThreadToken()
        // The replaced `lastValue` may hold operations: released after
        // unlocking, with the old value.
        let (old, replaced): (Value?, Value?) = stateLock.withLock {
            let replaced = lastValue
            lastValue = new
            // The newest value this thread recorded, if any.
            guard let index = pendingOld.lastIndex(where: { $0.thread == thread }) else {
                return (nil, replaced)
            }
            return (pendingOld.remove(at: index).value, replaced)
        }
        withExtendedLifetime(replaced) {}
        handler(root, ObservedChange(
            newValue: options.contains(.new) ? new : nil,
            oldValue: options.contains(.old) ? old : nil,
            isPrior: false
        ))
    }
}

/// Equality for values of unknown type: `==` when the type is Equatable,
/// otherwise "different" (so the change is reported).
private func valuesEqual<Value>(_ lhs: Value?, _ rhs: Value) -> Bool {
    guard let lhs else { return false }
    guard let equatable = lhs as? any Equatable else { return false }
    return equatable.isEqual(to: rhs)
}

private extension Equatable {
    func isEqual(to other: Any) -> Bool {
        guard let other = other as? Self else { return false }
        return self == other
    }
}

/// Reads a stored property named `key` (or `_key`) by reflection, for
/// string-keyed observation of a subclass's own properties.
///
/// Only the levels declared outside this module are read: the library's
/// own classes keep their state under locks that reflection would bypass
/// (reading them here would be a data race).
func reflectedValue(of object: AnyObject, key: String) -> Any? {
    var mirror: Mirror? = Mirror(reflecting: object)
    while let current = mirror, !isLibraryType(current.subjectType) {
        for child in current.children where child.label == key || child.label == "_" + key {
            return child.value
        }
        mirror = current.superclassMirror
    }
    return nil
}

/// Whether `type` is declared in this module (`Operations.…`).
private func isLibraryType(_ type: Any.Type) -> Bool {
    String(reflecting: type).hasPrefix(libraryTypePrefix)
}

/// The module prefix of this library's type names, read once.
private let libraryTypePrefix: String = {
    let name = String(reflecting: Operation.self)
    return String(name.prefix(upTo: name.lastIndex(of: ".") ?? name.endIndex)) + "."
}()

/// What the library observes: operations and queues. Each keeps one
/// registry, created on first use.
protocol ObservationHost: AnyObject {
    /// Adds `entry` to the object's registry (created if needed) and
    /// returns the registry.
    func registerObserver(_ entry: AnyObserverEntry) -> ObservationRegistry
}

/// Registers an observer of `key` (nil: re-evaluated on every announced
/// change) on `root`, delivers `.initial` if asked, and returns its token.
func startObserving<Root: ObservationHost, Value>(
    _ root: Root,
    key: String?,
    options: ObservationOptions,
    read: @escaping (Root) -> Value,
    handler: @escaping @Sendable (Root, ObservedChange<Value>) -> Void
) -> KeyValueObservation {
    let entry = ObserverEntry<Root, Value>(key: key, options: options, read: read, handler: handler)
    let registry = root.registerObserver(entry)
    entry.start(on: root)
    return KeyValueObservation(registry: registry, entry: entry)
}
