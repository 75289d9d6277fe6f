import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

// The operation's state word: the only code that changes it. Every other
// file reads a snapshot with `loadState()` or changes the state through
// `withStateLock`, whose body applies one of `OperationState`'s transitions.

extension Operation {
    /// A snapshot of the lifecycle state, without taking the lock.
    @inline(__always)
    final func loadState() -> OperationState {
        OperationState(raw: stateWord.load(ordering: .acquiring))
    }

    /// Runs `body` with the state lock bit held, then publishes the new state.
    ///
    /// `body` may read and write the fields guarded by the lock bit. It must
    /// not call user code, take a queue's lock, or take another operation's
    /// lock except through `withStateLocks(_:_:_:)`.
    ///
    /// Every reference that `body` copies out of the guarded fields is
    /// retained before the lock bit is released. The optimizer treats the
    /// releasing store as unrelated to reference counting and, without the
    /// fence below, could sink such a retain past it (it did, for
    /// `dependencies` in release builds): another thread could then release
    /// the field's reference, and free the object, in between. On x86-64
    /// the fence emits no instruction; it only orders the compiler.
    @inline(__always)
    final func withStateLock<R: ~Copyable>(_ body: (inout OperationState) -> R) -> R {
        var state = OperationState(raw: acquireStateLock())
        let result = body(&state)
        atomicMemoryFence(ordering: .acquiringAndReleasing)
        stateWord.store(state.raw, ordering: .releasing)
        return result
    }

    /// Takes the lock bit; returns the word as it was (unlocked).
    @inline(__always)
    private func acquireStateLock() -> UInt64 {
        var current = stateWord.load(ordering: .relaxed)
        var spins = 0
        while true {
            if current & OperationState.lockBit == 0 {
                let (exchanged, original) = stateWord.weakCompareExchange(
                    expected: current,
                    desired: current | OperationState.lockBit,
                    successOrdering: .acquiring,
                    failureOrdering: .relaxed
                )
                if exchanged { return current }
                current = original
            } else {
                // Critical sections are a few dozen instructions and never
                // call user code; yield only if the holder was preempted.
                spins += 1
                if spins > 64 { sched_yield() }
                current = stateWord.load(ordering: .relaxed)
            }
        }
    }

    /// Runs `body` with the lock bits of `first` and `second` held, taken in
    /// address order so that two threads locking the same pair in opposite
    /// roles cannot deadlock. The only place two operation locks nest.
    /// `first` and `second` must differ (the lock is not recursive).
    @inline(__always)
    static func withStateLocks<R>(
        _ first: Operation,
        _ second: Operation,
        _ body: (inout OperationState, inout OperationState) -> R
    ) -> R {
        let firstAddress = UInt(bitPattern: Unmanaged.passUnretained(first).toOpaque())
        let secondAddress = UInt(bitPattern: Unmanaged.passUnretained(second).toOpaque())
        if firstAddress < secondAddress {
            return first.withStateLock { firstState in
                second.withStateLock { secondState in body(&firstState, &secondState) }
            }
        }
        return second.withStateLock { secondState in
            first.withStateLock { firstState in body(&firstState, &secondState) }
        }
    }

    /// Moves a plain operation from pending to base-executing in one
    /// compare-and-swap, consuming the queue-start mark: the start of an
    /// operation without dependencies, observers, cancellation or a failure
    /// policy. A start by hand (`byQueue` false) also requires that no queue
    /// owns the operation. Returns false to take the general path.
    @inline(__always)
    final func tryFastStart(byQueue: Bool) -> Bool {
        let mask = byQueue ? OperationState.fastStartMask : OperationState.fastStartMask | OperationState.enqueuedFlag
        var current = stateWord.load(ordering: .relaxed)
        while current & mask == 0 {
            let desired = (current | OperationState.baseExecutingFlag) & ~OperationState.queueStartFlag
            let (exchanged, original) = stateWord.weakCompareExchange(
                expected: current,
                desired: desired,
                successOrdering: .acquiringAndReleasing,
                failureOrdering: .relaxed
            )
            if exchanged { return true }
            current = original
        }
        return false
    }

    /// What a queue's claim (`claimForDispatch`) requires of an operation.
    enum ClaimCondition {
        /// Nothing: a cancelled operation is ready whatever its dependencies.
        case none
        /// Its base readiness: cancelled, or no unfinished dependency.
        case baseReadiness
        /// For a class that overrides `isReady`: no dependency counted since
        /// the queue last read the override (`isReadinessStale` clear).
        case freshReadiness
    }

    /// Marks the operation taken by its queue to start (`isDispatched`), in
    /// one compare-and-swap when its lock bit is free, if it meets
    /// `condition`. This decides the race with another thread's
    /// `addDependency`, which counts its edge only before the mark: an edge
    /// counted first makes a base-readiness operation fail the check, and
    /// marks an `isReady` override's last reading stale until the queue
    /// reads it again. Returns whether the operation was marked. Call with
    /// the queue's lock held (lock order: queue, then operation).
    @inline(__always)
    final func claimForDispatch(_ condition: ClaimCondition) -> Bool {
        let current = stateWord.load(ordering: .relaxed)
        if current & OperationState.lockBit == 0 {
            switch condition {
            case .none: break
            case .baseReadiness: if !OperationState(raw: current).isBaseReady { return false }
            case .freshReadiness: if current & OperationState.readinessStaleFlag != 0 { return false }
            }
            if stateWord.compareExchange(
                expected: current,
                desired: current | OperationState.dispatchedFlag,
                successOrdering: .acquiringAndReleasing,
                failureOrdering: .relaxed
            ).exchanged { return true }
        }
        return claimForDispatchUnderLock(condition)
    }

    /// `claimForDispatch`'s path when the word changed or another thread
    /// holds the lock bit: under the lock. Out of line, so that the queue's
    /// pick stays small.
    @inline(never)
    private func claimForDispatchUnderLock(_ condition: ClaimCondition) -> Bool {
        withStateLock { state in
            switch condition {
            case .none: break
            case .baseReadiness: if !state.isBaseReady { return false }
            case .freshReadiness: if state.isReadinessStale { return false }
            }
            state.isDispatched = true
            return true
        }
    }

    /// Clears the readiness-stale mark, returning whether it was set: the
    /// queue is about to read the `isReady` override, which now sees every
    /// dependency counted so far. Call with the queue's lock held (lock
    /// order: queue, then operation).
    final func takeStaleReadiness() -> Bool {
        guard loadState().isReadinessStale else { return false }
        return withStateLock { state in
            let wasStale = state.isReadinessStale
            state.isReadinessStale = false
            return wasStale
        }
    }

    /// Removes one unfinished dependency in one compare-and-swap when at
    /// least one more remains and nothing watches the operation (no
    /// observers, no failure policy). Nothing else changes then: the
    /// operation stays not ready (or was already ready, being cancelled), so
    /// there is nothing to announce, report or admit. Saves the lock bit's
    /// second write on a fan-in, where every finishing dependency hits the
    /// same word. Returns false to take the general path.
    @inline(__always)
    final func tryFastDependencyFinished() -> Bool {
        var current = stateWord.load(ordering: .relaxed)
        // The count sits in the word's top bits, so comparing the whole
        // word against the minimum compares the count.
        while current & OperationState.fastDependencyMask == 0, current >= OperationState.fastDependencyMinimum {
            let (exchanged, original) = stateWord.weakCompareExchange(
                expected: current,
                desired: current &- OperationState.dependencyStep,
                successOrdering: .acquiringAndReleasing,
                failureOrdering: .relaxed
            )
            if exchanged { return true }
            current = original
        }
        return false
    }

    /// The extras box, created on first use. Call with the lock bit held.
    final func extrasWhileLocked() -> OperationExtras {
        if let extras { return extras }
        let created = OperationExtras()
        created.membership = membership
        membershipAndExtras = .extras(created)
        return created
    }
}
