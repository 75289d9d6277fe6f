// A recorded trace drawn as a self-contained SVG timeline: a picture that
// any browser shows, with no tool to install.

extension OperationTrace {
    /// The widest drawing `svgTimeline(width:)` makes, in pixels.
    static let maximumSVGWidth = 1_000_000

    /// The trace as a self-contained SVG timeline.
    ///
    /// One row per thread that started operations, time running left to
    /// right; each operation that started is a bar from its start to its
    /// finish, coloured by its queue when the trace has several (otherwise by
    /// the first word of its name, such as a pipeline's stage; a cancelled
    /// one is hatched grey), with
    /// its label when the bar is wide enough and a tooltip (`<title>`) giving
    /// its name, queue, class and times. Dependency edges are drawn as arrows
    /// from the end of the dependency's bar to the start of the dependent's.
    /// A legend names the colours.
    ///
    /// - Parameter width: The width of the drawing area in pixels, from 200
    ///   to 1,000,000: a width outside that range is brought to the nearer
    ///   end (`Int.max` draws 1,000,000 pixels wide).
    /// - Complexity: O(operations + dependency edges).
    public func svgTimeline(width: Int = 1_200) -> String {
        let plotWidth = Double(min(max(200, width), Self.maximumSVGWidth))
        let labelWidth = 130.0
        let rowHeight = 26.0
        let top = 40.0
        let rows = max(1, workers.count)
        let legendTop = top + Double(rows) * rowHeight + 34
        let total = Double(max(duration, operations.compactMap(\.finished).max() ?? 1, 1))
        // Colours: by queue when there are several, otherwise by the first
        // word of the operations' labels (the stages of a pipeline).
        let byQueue = queues.count > 1
        var groupNames: [String] = []
        var groupIndex: [String: Int] = [:]
        func group(of operation: OperationRecord) -> Int? {
            let key: String
            if byQueue {
                guard let queue = operation.queue else { return nil }
                key = queues[queue].name
            } else {
                key = String(operation.label.split(separator: " ").first ?? "")
            }
            if let known = groupIndex[key] { return known }
            guard groupNames.count < 12 else { return nil }
            groupIndex[key] = groupNames.count
            groupNames.append(key)
            return groupNames.count - 1
        }
        let groups = operations.map { $0.started == nil ? nil : group(of: $0) }
        let legendRows = (groupNames.count + 3) / 4
        let height = legendTop + 20 + Double(legendRows) * 18
        func x(_ time: UInt64) -> Double { labelWidth + Double(time) / total * plotWidth }
        func y(_ worker: Int) -> Double { top + Double(worker) * rowHeight }
        func number(_ value: Double) -> String {
            let rounded = (value * 10).rounded() / 10
            // Whole numbers without a fraction; `Int(exactly:)` also keeps a
            // value beyond `Int`'s range (or not finite) from trapping.
            if let whole = Int(exactly: rounded) { return String(whole) }
            return rounded.isFinite ? String(rounded) : "0"
        }

        var svg = """
        <svg xmlns="http://www.w3.org/2000/svg" width="\(number(labelWidth + plotWidth + 20))" height="\(number(height))" \
        font-family="sans-serif" font-size="11">
        <title>Operations trace: \(operations.count) operations on \(workers.count) threads over \(Self.formatDuration(total))</title>
        <defs>
        <marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="6" markerHeight="6" orient="auto">\
        <path d="M0,0 L8,4 L0,8 z" fill="#555"/></marker>
        <pattern id="cancelled" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">\
        <rect width="6" height="6" fill="#ddd"/><line x1="0" y1="0" x2="0" y2="6" stroke="#999" stroke-width="2"/></pattern>
        </defs>
        <rect width="100%" height="100%" fill="white"/>
        <text x="8" y="18" font-size="13" font-weight="bold">\(Self.escaped("Operations trace: \(operations.count) operations, \(workers.count) threads, \(Self.formatDuration(total))"))</text>

        """
        // Rows and the time axis.
        for worker in workers {
            let rowY = y(worker.id)
            svg += "<rect x=\"\(number(labelWidth))\" y=\"\(number(rowY))\" width=\"\(number(plotWidth))\" height=\"\(number(rowHeight - 4))\" fill=\"\(worker.id % 2 == 0 ? "#f6f6f6" : "#fbfbfb")\"/>\n"
            svg += "<text x=\"8\" y=\"\(number(rowY + rowHeight / 2 + 2))\">\(Self.escaped(worker.name))</text>\n"
        }
        let axisY = top + Double(rows) * rowHeight + 4
        for tick in 0...4 {
            let time = UInt64(total * Double(tick) / 4)
            let tickX = x(time)
            svg += "<line x1=\"\(number(tickX))\" y1=\"\(number(top - 4))\" x2=\"\(number(tickX))\" y2=\"\(number(axisY))\" stroke=\"#ccc\"/>\n"
            svg += "<text x=\"\(number(tickX))\" y=\"\(number(axisY + 14))\" text-anchor=\"middle\" fill=\"#555\">\(Self.formatDuration(Double(time)))</text>\n"
        }
        // Bars.
        for operation in operations {
            guard let started = operation.started, let worker = operation.worker else { continue }
            let end = operation.finished ?? duration
            let barX = x(started)
            let barWidth = max(1.5, x(end) - barX)
            let fill = operation.cancelled != nil ? "url(#cancelled)" : Self.colour(forGroup: groups[operation.id])
            svg += "<g class=\"operation\" data-id=\"\(operation.id)\"><title>\(Self.escaped(tooltip(for: operation)))</title>"
            svg += "<rect x=\"\(number(barX))\" y=\"\(number(y(worker) + 2))\" width=\"\(number(barWidth))\" height=\"\(number(rowHeight - 8))\" fill=\"\(fill)\" stroke=\"#333\" stroke-width=\"0.5\"/>"
            if barWidth > Double(operation.label.count) * 6 + 6 {
                svg += "<text x=\"\(number(barX + 3))\" y=\"\(number(y(worker) + rowHeight / 2 + 2))\" fill=\"#111\">\(Self.escaped(operation.label))</text>"
            }
            svg += "</g>\n"
        }
        // Dependency edges.
        for operation in operations {
            guard let started = operation.started, let worker = operation.worker else { continue }
            for dependencyID in operation.dependencies {
                let dependency = operations[dependencyID]
                guard let dependencyWorker = dependency.worker, let finished = dependency.finished ?? dependency.started else { continue }
                svg += "<line class=\"edge\" x1=\"\(number(x(finished)))\" y1=\"\(number(y(dependencyWorker) + rowHeight / 2))\" "
                svg += "x2=\"\(number(x(started)))\" y2=\"\(number(y(worker) + rowHeight / 2))\" stroke=\"#555\" stroke-width=\"0.8\" "
                svg += "stroke-opacity=\"0.7\" marker-end=\"url(#arrow)\"><title>\(Self.escaped("\(dependency.label) → \(operation.label)"))</title></line>\n"
            }
        }
        // Legend.
        for (index, name) in groupNames.enumerated() {
            let column = Double(index % 4)
            let row = Double(index / 4)
            let legendX = labelWidth + column * (plotWidth / 4)
            let legendY = legendTop + row * 18
            svg += "<rect x=\"\(number(legendX))\" y=\"\(number(legendY - 9))\" width=\"12\" height=\"10\" fill=\"\(Self.colour(forGroup: index))\" stroke=\"#333\" stroke-width=\"0.5\"/>"
            svg += "<text x=\"\(number(legendX + 16))\" y=\"\(number(legendY))\">\(Self.escaped(byQueue ? "queue " + name : name))</text>\n"
        }
        svg += "</svg>\n"
        return svg
    }

    private func tooltip(for operation: OperationRecord) -> String {
        var lines = ["\(operation.label) (\(operation.typeName)) on \(queueName(of: operation))"]
        if let started = operation.started {
            let end = operation.finished ?? duration
            lines.append("started \(Self.formatDuration(Double(started))), ran \(Self.formatDuration(Double(end >= started ? end - started : 0)))")
        }
        if let added = operation.added, let started = operation.started, started >= added {
            lines.append("waited \(Self.formatDuration(Double(started - added))) after it was added")
        }
        if operation.cancelled != nil { lines.append("cancelled") }
        if !operation.dependencies.isEmpty {
            lines.append("after " + operation.dependencies.map { operations[$0].label }.joined(separator: ", "))
        }
        return lines.joined(separator: "\n")
    }

    /// A colour per group (queue or stage), from a palette that stays
    /// readable with black text; grey for none.
    static func colour(forGroup group: Int?) -> String {
        let palette = ["#8ecae6", "#ffb703", "#90be6d", "#f4978e", "#cdb4db", "#f9c74f", "#80ed99", "#ffafcc", "#a9def9", "#e9c46a", "#b8c0ff", "#ffd6a5"]
        guard let group else { return "#bbbbbb" }
        return palette[group % palette.count]
    }

    /// `nanoseconds` as a short duration: "850 ns", "12.5 µs", "3.2 ms", "1.25 s".
    static func formatDuration(_ nanoseconds: Double) -> String {
        func short(_ value: Double) -> String {
            let digits = value >= 100 ? 0 : value >= 10 ? 1 : 2
            var factor = 1.0
            for _ in 0..<digits { factor *= 10 }
            let rounded = (value * factor).rounded() / factor
            return digits == 0 ? String(Int(rounded)) : String(rounded)
        }
        if nanoseconds < 1_000 { return "\(Int(nanoseconds)) ns" }
        if nanoseconds < 1_000_000 { return short(nanoseconds / 1_000) + " µs" }
        if nanoseconds < 1_000_000_000 { return short(nanoseconds / 1_000_000) + " ms" }
        return short(nanoseconds / 1_000_000_000) + " s"
    }

    /// `text` escaped for XML character data and attribute values. The
    /// characters XML 1.0 does not allow at all (control characters other
    /// than tab, line feed and carriage return; U+FFFE and U+FFFF) become
    /// U+FFFD, so that any operation name makes a well-formed document.
    static func escaped(_ text: String) -> String {
        var result = ""
        result.reserveCapacity(text.utf8.count)
        for scalar in text.unicodeScalars {
            switch scalar {
            case "&": result += "&amp;"
            case "<": result += "&lt;"
            case ">": result += "&gt;"
            case "\"": result += "&quot;"
            case "'": result += "&apos;"
            case "\t", "\n", "\r": result.unicodeScalars.append(scalar)
            case _ where scalar.value < 0x20 || scalar.value == 0xFFFE || scalar.value == 0xFFFF:
                result += "\u{FFFD}"
            default: result.unicodeScalars.append(scalar)
            }
        }
        return result
    }
}
