// `NSObjectProtocol` for the library's operations and queues, for code that
// adopts Foundation protocols that refine it.
//
// On Apple platforms `Operation` and `OperationQueue` are `NSObject`s, so a
// subclass can adopt `ProgressReporting` (or another protocol that refines
// `NSObjectProtocol`) with nothing more than the protocol's own
// requirements. The core module does not import Foundation; it already has
// `NSObject`'s `isEqual(_:)`, `hash`, `description` and `debugDescription`,
// and this module adds the rest of the protocol and the conformance.

import protocol Foundation.NSObjectProtocol
import Operations

extension Operation: NSObjectProtocol {
    /// The operation itself, as `NSObjectProtocol` requires.
    public func `self`() -> Self { self }

    /// False: an operation is never a proxy for another object.
    public func isProxy() -> Bool { false }
}

extension OperationQueue: NSObjectProtocol {
    /// The queue itself, as `NSObjectProtocol` requires.
    public func `self`() -> Self { self }

    /// False: a queue is never a proxy for another object.
    public func isProxy() -> Bool { false }
}
