//! What a bench's repeated passes or runs are summed up by.

/// The middle value of `xs` (the upper of the two middle ones for an even
/// count); `xs` is not empty.
pub(crate) fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn the_median_is_the_middle_value_or_the_upper_of_the_two_middle_ones() {
        assert_eq!(median(vec![0.7, 0.9, 0.6]), 0.7);
        assert_eq!(median(vec![0.8, 0.6, 0.7, 0.9]), 0.8);
    }
}
