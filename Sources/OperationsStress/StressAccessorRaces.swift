import Operations
import Synchronization

extension StressRound {
    /// Reads an operation's guarded properties on this thread while another
    /// thread edits them: `dependencies` against `addDependency` /
    /// `removeDependency`, then `name` and `completionBlock` against their
    /// setters. Each read copies a reference out under the operation's lock;
    /// a copy retained only after the lock was released (as the optimizer
    /// once arranged, in release builds only) is a use-after-free here: a
    /// crash, or an AddressSanitizer report in the sanitized soak. Also
    /// checks that every value read is one that was written. Without the
    /// fix, the `dependencies` phase crashed a release build within its
    /// first 200 ms.
    func runAccessorRaces(iterations: Int = 2_000_000, budget: Duration = .milliseconds(200)) {
        let subject = BlockOperation {}
        var unexpected: [String] = []
        // At most `budget` per phase: the race is most likely in the first
        // rounds of a soak, and a round should not double in length.
        let clock = ContinuousClock()
        let deadline = clock.now + budget
        race(editing: {
            let dependency = BlockOperation {}
            subject.addDependency(dependency)
            subject.removeDependency(dependency)
        }, reading: {
            for step in 0..<iterations {
                if step & 1023 == 0, clock.now > deadline { return }
                let dependencies = subject.dependencies
                if dependencies.count > 1 { unexpected.append("dependencies had \(dependencies.count) entries, at most 1 was added") }
                for dependency in dependencies where dependency.isFinished {
                    unexpected.append("a dependency that never ran reads as finished")
                }
                if unexpected.count > 3 { return }
            }
        })
        race(editing: {
            let mark = Int.random(in: 0..<1_000)
            subject.name = "edit \(mark)"
            subject.completionBlock = { _ = mark }
        }, reading: {
            let nameDeadline = clock.now + budget / 4
            for step in 0..<iterations / 4 {
                if step & 1023 == 0, clock.now > nameDeadline { return }
                if let name = subject.name, !name.hasPrefix("edit ") { unexpected.append("name read as \(name)") }
                _ = subject.completionBlock
                if unexpected.count > 3 { return }
            }
        })
        for message in unexpected.prefix(3) { violate(.other, "accessor race: \(message)") }
    }

    /// Runs `edit` in a loop on another thread while `read` runs here.
    private func race(editing edit: @escaping @Sendable () -> Void, reading read: () -> Void) {
        let stop = Atomic<Bool>(false)
        let editor = StressThread.start {
            while !stop.load(ordering: .relaxed) { edit() }
        }
        guard let editor else {
            violate(.other, "engine: could not create the accessor-race thread")
            return
        }
        read()
        stop.store(true, ordering: .relaxed)
        if !editor.join(timeout: configuration.waitTimeout) {
            violate(.timeout, "the accessor-race editor did not stop within \(configuration.waitTimeout)")
        }
    }
}
