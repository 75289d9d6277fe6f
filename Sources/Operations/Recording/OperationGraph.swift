// A dependency graph drawn as GraphViz DOT: what waits for what, coloured by
// state, with dependency cycles highlighted.

/// Draws dependency graphs of live operations in GraphViz's DOT language
/// (render with `dot -Tsvg graph.dot -o graph.svg`).
///
/// ```swift
/// let dot = queue.dependencyGraphDOT()          // the queue's operations
/// let same = OperationGraph.dot(of: [a, b, c])  // any operations
/// ```
///
/// Each operation is a node labelled with its name (or class), its state and
/// its queue, filled by state: pending white, ready light blue, executing
/// gold, finished green, cancelled grey. An arrow goes from a dependency to
/// the operation that waits for it (the order in which they run).
/// Dependencies outside the given operations are drawn too, with a dashed
/// border. Every dependency cycle (see ``OperationQueue/diagnostics()``) is
/// drawn in red, with the operations on it outlined in red.
///
/// The graph is a snapshot: operations keep changing while it is drawn. It
/// reads the (possibly overridden) state getters and names, never while a
/// library lock is held.
public enum OperationGraph {
    /// The dependency graph of `operations` and of everything they depend
    /// on, transitively, as a DOT `digraph` named `title`.
    ///
    /// - Complexity: O(V + E) over the operations reachable from `operations`.
    public static func dot(of operations: [Operation], title: String = "operations") -> String {
        // Collect the nodes: the given operations first, then their dependencies.
        var index: [ObjectIdentifier: Int] = [:]
        var nodes: [Operation] = []
        var given: Set<ObjectIdentifier> = []
        for operation in operations where index[ObjectIdentifier(operation)] == nil {
            index[ObjectIdentifier(operation)] = nodes.count
            nodes.append(operation)
            given.insert(ObjectIdentifier(operation))
        }
        var edges: [(from: Int, to: Int)] = []
        var cursor = 0
        while cursor < nodes.count {
            let dependent = nodes[cursor]
            for dependency in dependent.dependencies {
                let key = ObjectIdentifier(dependency)
                let from: Int
                if let known = index[key] {
                    from = known
                } else {
                    from = nodes.count
                    index[key] = from
                    nodes.append(dependency)
                }
                edges.append((from, cursor))
            }
            cursor += 1
        }
        // Cycles: "a depends on b" pairs to highlight.
        var cycleEdges: Set<Pair> = []
        var cycleNodes: Set<Int> = []
        for cycle in DependencyGraph.cycles(reachableFrom: nodes, limit: 64) {
            for (dependent, dependency) in zip(cycle, cycle.dropFirst()) {
                guard let to = index[ObjectIdentifier(dependent)], let from = index[ObjectIdentifier(dependency)] else { continue }
                cycleEdges.insert(Pair(from: from, to: to))
                cycleNodes.insert(from)
                cycleNodes.insert(to)
            }
        }

        var text = "digraph \(quoted(title)) {\n"
        text += "  rankdir=LR;\n"
        text += "  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=10];\n"
        text += "  edge [color=\"#555555\"];\n"
        for (id, operation) in nodes.enumerated() {
            let state = NodeState(operation)
            var attributes = [
                "label=\(quoted(label(for: operation, state: state)))",
                "fillcolor=\(quoted(state.fill))",
            ]
            var styles = ["rounded", "filled"]
            if !given.contains(ObjectIdentifier(operation)) { styles.append("dashed") }
            attributes.append("style=\(quoted(styles.joined(separator: ",")))")
            if cycleNodes.contains(id) { attributes += ["color=\"#d00000\"", "penwidth=2"] }
            text += "  op\(id) [\(attributes.joined(separator: ", "))];\n"
        }
        for edge in edges {
            if cycleEdges.contains(Pair(from: edge.from, to: edge.to)) {
                text += "  op\(edge.from) -> op\(edge.to) [color=\"#d00000\", penwidth=2, label=\"cycle\", fontcolor=\"#d00000\"];\n"
            } else {
                text += "  op\(edge.from) -> op\(edge.to);\n"
            }
        }
        text += "}\n"
        return text
    }

    private struct Pair: Hashable {
        let from: Int
        let to: Int
    }

    /// The state a node shows.
    private enum NodeState {
        case pending, ready, executing, finished, cancelled

        init(_ operation: Operation) {
            if operation.isFinished {
                self = operation.isCancelled ? .cancelled : .finished
            } else if operation.isExecuting {
                self = .executing
            } else if operation.isCancelled {
                self = .cancelled
            } else {
                self = operation.isReady ? .ready : .pending
            }
        }

        var fill: String {
            switch self {
            case .pending: return "#ffffff"
            case .ready: return "#cfe8ff"
            case .executing: return "#ffd166"
            case .finished: return "#b7e4a8"
            case .cancelled: return "#d0d0d0"
            }
        }

        var name: String {
            switch self {
            case .pending: return "pending"
            case .ready: return "ready"
            case .executing: return "executing"
            case .finished: return "finished"
            case .cancelled: return "cancelled"
            }
        }
    }

    private static func label(for operation: Operation, state: NodeState) -> String {
        let title = operation.name ?? String(describing: type(of: operation))
        let queue = operation.owningQueueForAnalysis()?.name ?? "no queue"
        return "\(title)\n\(state.name) · \(queue)"
    }

    /// `text` as a DOT string literal.
    static func quoted(_ text: String) -> String {
        var result = "\""
        // By scalar, not by `Character`: a quote or backslash followed by a
        // combining mark is one grapheme, and must still be escaped.
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": result += "\\\""
            case "\\": result += "\\\\"
            case "\n": result += "\\n"
            // Other control characters end or break a DOT string (GraphViz
            // reads a NUL as its end): replaced, as in the SVG timeline.
            case "\t": result += " "
            case "\u{0}"..."\u{1F}", "\u{7F}": result += "\u{FFFD}"
            default: result.unicodeScalars.append(scalar)
            }
        }
        return result + "\""
    }
}

extension OperationQueue {
    /// The dependency graph of the queue's unfinished operations (and of
    /// what they depend on) in GraphViz's DOT language; see ``OperationGraph``.
    public func dependencyGraphDOT() -> String {
        OperationGraph.dot(of: operations, title: name ?? "OperationQueue")
    }
}
