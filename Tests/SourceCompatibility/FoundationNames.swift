// Foundation's names for the observation types (probe 50: the options type had
// no alias), and the usual token bookkeeping.
import Operations

final class Watcher {
    private var tokens: [NSKeyValueObservation] = []

    func watch(_ operation: Operation) {
        let options: NSKeyValueObservingOptions = [.new, .old, .prior]
        tokens.append(operation.observe(\.isFinished, options: options) { (_, change: NSKeyValueObservedChange<Bool>) in
            if change.isPrior { return }
            print(change.newValue ?? false)
        })
    }
}
