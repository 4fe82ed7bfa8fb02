extension Duration {
    /// The duration as a number of seconds.
    package var inSeconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }

    /// The duration in nanoseconds, saturating at `Int64.max` (and `Int64.min`) instead of
    /// trapping: a timeout of centuries means "practically never".
    package var saturatingNanoseconds: Int64 {
        let (seconds, attoseconds) = components
        let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return seconds < 0 ? .min : .max }
        let (sum, overflowed) = scaled.addingReportingOverflow(attoseconds / 1_000_000_000)
        return overflowed ? (attoseconds < 0 ? .min : .max) : sum
    }
}
