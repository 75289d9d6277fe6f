// The key-path forms of `willChangeValue(forKey:)` and
// `didChangeValue(forKey:)`, as Foundation's `NSObject` offers them
// (`willChangeValue(for: \.isReady)`).
//
// Each form has two overloads. The one whose root is the library's class
// (`KeyPath<Operation, Value>`) is preferred whenever the property exists
// there, so `\.isReady` written inside a subclass, even a final one that
// overrides `isReady`, names the base property, which the library knows by
// name. The generic one (`KeyPath<Self, Value>`) takes a subclass's own
// properties. Both end in the overridable string-keyed methods, as
// Foundation's do, so a subclass that overrides those sees every
// announcement.

// `_forEachField` names a class's stored properties from its metadata, to
// name a computed property's key path (`KeyPathNames.computedName`).
@_spi(Reflection) import Swift

extension Operation {
    /// Announces that the value at `keyPath` is about to change: the
    /// key-path form of ``willChangeValue(forKey:)``, which it calls with the
    /// property's name.
    ///
    /// ```swift
    /// willChangeValue(for: \.isReady)
    /// conditionsMet = true
    /// didChangeValue(for: \.isReady)
    /// ```
    public func willChangeValue<Value>(for keyPath: KeyPath<Operation, Value>) {
        willChangeValue(forKey: Operation.announcementKey(for: keyPath))
    }

    /// Announces that the value at `keyPath` has changed: the key-path form
    /// of ``didChangeValue(forKey:)``, which it calls with the property's
    /// name (so `didChangeValue(for: \.isFinished)` finishes an operation
    /// whose `isFinished` getter now returns true, as the string form does).
    public func didChangeValue<Value>(for keyPath: KeyPath<Operation, Value>) {
        didChangeValue(forKey: Operation.announcementKey(for: keyPath))
    }
}

extension KeyValueObservable where Self: Operation {
    /// Announces that a subclass's own property at `keyPath` is about to
    /// change, for observers registered with `observe(_:)` or
    /// `observe(key:)`: the key-path form of
    /// ``Operation/willChangeValue(forKey:)``, called with the property's
    /// name.
    ///
    /// A stored property is named after its declaration (`\.state` is
    /// `"state"`, `\.progress.fraction` is `"progress.fraction"`). A computed
    /// property of a subclass has no name that Swift can report: its
    /// announcement reaches the observers of that key path (which re-read
    /// the value), but not those registered by a string key. Announce such
    /// a property with ``Operation/willChangeValue(forKey:)`` instead.
    public func willChangeValue<Value>(for keyPath: KeyPath<Self, Value>) {
        willChangeValue(forKey: ownAnnouncementKey(for: keyPath))
    }

    /// Announces that a subclass's own property at `keyPath` has changed:
    /// the key-path form of ``Operation/didChangeValue(forKey:)``. See
    /// the will-change form for how the key is named.
    public func didChangeValue<Value>(for keyPath: KeyPath<Self, Value>) {
        didChangeValue(forKey: ownAnnouncementKey(for: keyPath))
    }

    /// The key an announcement of a subclass's property is made under,
    /// computed properties included (see ``KeyPathNames``).
    private func ownAnnouncementKey<Value>(for keyPath: KeyPath<Self, Value>) -> String {
        KeyPathNames.key(for: keyPath, known: Self.observationKey(for: keyPath), valueType: Value.self, announcer: self)
    }
}

extension OperationQueue {
    /// Announces that the value at `keyPath` is about to change: the
    /// key-path form of ``willChangeValue(forKey:)``, which it calls with the
    /// property's name.
    public func willChangeValue<Value>(for keyPath: KeyPath<OperationQueue, Value>) {
        willChangeValue(forKey: OperationQueue.announcementKey(for: keyPath))
    }

    /// Announces that the value at `keyPath` has changed: the key-path form
    /// of ``didChangeValue(forKey:)``, which it calls with the property's
    /// name.
    public func didChangeValue<Value>(for keyPath: KeyPath<OperationQueue, Value>) {
        didChangeValue(forKey: OperationQueue.announcementKey(for: keyPath))
    }
}

extension KeyValueObservable where Self: OperationQueue {
    /// Announces that a subclass's own property at `keyPath` is about to
    /// change: the key-path form of
    /// ``OperationQueue/willChangeValue(forKey:)``. Named as for an
    /// operation's own properties (a stored property by its declaration).
    public func willChangeValue<Value>(for keyPath: KeyPath<Self, Value>) {
        willChangeValue(forKey: Self.announcementKey(for: keyPath))
    }

    /// Announces that a subclass's own property at `keyPath` has changed:
    /// the key-path form of ``OperationQueue/didChangeValue(forKey:)``.
    public func didChangeValue<Value>(for keyPath: KeyPath<Self, Value>) {
        didChangeValue(forKey: Self.announcementKey(for: keyPath))
    }
}

/// The string key a key-path announcement is made under.
enum KeyPathNames {
    /// What a key path's description says, by key path: its name, or none
    /// (a computed property, or one a subclass can override).
    private static let described = LockedValue<[AnyKeyPath: Described]>([:])
    /// The keys that key paths without a name were announced under, by
    /// the announcing operation's class (whose dependent keys decide it)
    /// and key path.
    private static let resolved = LockedValue<[Resolution: String]>([:])

    private enum Described {
        case named(String)
        case unnamed(description: String)
    }

    private struct Resolution: Hashable {
        let operationType: ObjectIdentifier
        let keyPath: AnyKeyPath
    }

    /// `known` (the library's name for one of its own properties), else the
    /// name Swift reports for a stored property (its path after the root
    /// type: `\Download.state` is `"state"`), else, for an operation class,
    /// the one key of its own that its lifecycle keys depend on and that
    /// the key path stands for (``computedName(valueType:in:sources:)``), else the
    /// whole description. The last reaches only observers of that key
    /// path, which re-read their value on any announcement, and no observer
    /// registered by name.
    ///
    /// Call with no lock held: naming a computed property asks the class's
    /// `keyPathsForValuesAffectingValue(forKey:)`, which is user code.
    static func key(for keyPath: AnyKeyPath, known: String?, valueType: Any.Type? = nil, announcer: Operation? = nil) -> String {
        if let known { return known }
        let description: String
        switch described.withLock({ $0[keyPath] }) ?? describe(keyPath) {
        case .named(let name): return name
        case .unnamed(let text): description = text
        }
        guard let valueType, let announcer else { return description }
        let operationType = type(of: announcer)
        let resolution = Resolution(operationType: ObjectIdentifier(operationType), keyPath: keyPath)
        if let key = resolved.withLock({ $0[resolution] }) { return key }
        let sources = DependentKeys.ownSourceKeys(in: operationType)
        let name = computedName(valueType: valueType, in: operationType, sources: sources)
        let key = name ?? description
        // Another thread may have resolved it meanwhile: the first answer
        // stays, and only the thread that stored it reports.
        let stored = resolved.withLock { table -> Bool in
            guard table[resolution] == nil else { return false }
            table[resolution] = key
            return true
        }
        if stored, name == nil, !sources.isEmpty { reportUnnamed(description, sources: sources, by: announcer) }
        return key
    }

    /// Reads `keyPath`'s description once, and caches what it says.
    private static func describe(_ keyPath: AnyKeyPath) -> Described {
        let description = String(describing: keyPath)
        let prefix = "\\" + String(describing: type(of: keyPath).rootType) + "."
        var result = Described.unnamed(description: description)
        if description.hasPrefix(prefix) {
            let path = String(description.dropFirst(prefix.count))
            // A computed component prints as `<computed 0x… (Type)>`.
            if !path.isEmpty, !path.contains("<") { result = .named(path) }
        }
        described.withLock { $0[keyPath] = result }
        return result
    }

    /// The name of a computed property of an operation class, or of one
    /// that a subclass can override (Swift prints such a key path without
    /// its name), when the class says which of its keys its lifecycle keys
    /// depend on: the one such key `k` for which the class stores a
    /// property named `k` or `_k` of the key path's value type, or of one
    /// generic wrapper of it (the usual `private var _state: State` behind
    /// `var state: State`, a property wrapper's `_state: Atomic<State>`, a
    /// `Mutex<State>`). Nil when
    /// none or more than one matches, and for a value type of the standard
    /// library (`Bool`, `Int`, `String`, optionals…): many properties share
    /// those, so a match would be a guess. A type of the program's own,
    /// such as a state enum, is what the pattern uses.
    ///
    /// On Darwin such a property is `@objc` and its key path carries the
    /// name, so `willChangeValue(for: \.state)` also announces the
    /// `isReady`, `isExecuting` and `isFinished` that depend on `state`:
    /// ported operations rely on it to start and finish.
    private static func computedName(valueType: Any.Type, in type: Operation.Type, sources: [String]) -> String? {
        guard !sources.isEmpty, !String(reflecting: valueType).hasPrefix("Swift.") else { return nil }
        let stored = storedProperties(of: type)
        // The value itself, or the value inside one generic wrapper: a
        // property wrapper (`@Atomic var state: State` stores `_state:
        // Atomic<State>`) or a lock that holds it (`Mutex<State>`).
        let wrapped = "<" + String(reflecting: valueType) + ">"
        let matches = sources.filter { source in
            stored.contains { field in
                guard field.name == source || field.name == "_" + source else { return false }
                return field.type == valueType || String(reflecting: field.type).hasSuffix(wrapped)
            }
        }
        return matches.count == 1 ? matches[0] : nil
    }

    /// The stored properties that `type` and its superclasses below
    /// `Operation` declare: names and types from the type's metadata. No
    /// instance is read.
    private static func storedProperties(of type: Operation.Type) -> [(name: String, type: Any.Type)] {
        var own: [(name: String, type: Any.Type)] = []
        var library: Set<Int> = []
        // `_EachFieldOptions.classType` (its raw value: the stdlib declares
        // the constant as a mutable static).
        let classType = _EachFieldOptions(rawValue: 1 << 0)
        _ = _forEachField(of: Operation.self, options: classType) { _, offset, _, _ in
            library.insert(offset)
            return true
        }
        _ = _forEachField(of: type, options: classType) { name, offset, fieldType, _ in
            if !library.contains(offset) { own.append((String(cString: name), fieldType)) }
            return true
        }
        return own
    }

    /// A key path that could not be named was announced on an operation
    /// class whose lifecycle keys depend on keys of its own (`sources`): it
    /// was probably meant to announce one of them, and cannot. Reported
    /// once per class and key path (the caller caches the key), never
    /// refused.
    private static func reportUnnamed(_ description: String, sources: [String], by announcer: Operation) {
        let names = sources.map { "\"\($0)\"" }.joined(separator: ", ")
        _ = OperationMisuse.reportTolerated(
            .unnamedKeyPathAnnouncement,
            subject: .operation(announcer),
            "announced a change of \(description), a computed (or overridable) property whose name Swift does not report, while its lifecycle keys depend on \(names) (keyPathsForValuesAffectingValue(forKey:)). The announcement reaches observers of that key path only: neither observers of those keys nor its queue hear of it. Announce the property by name, with willChangeValue(forKey:) and didChangeValue(forKey:)."
        )
    }
}
