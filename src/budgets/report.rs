//! The spend report: what settled attempts were charged, grouped by the
//! dimensions a platform team asks about (key, owner, team, tag, route,
//! provider, model, day).
//!
//! Read from the attempts' own charges, so its totals are, to the
//! nano-unit, the sum of what was charged. A tag is a dimension of many
//! values: grouped by tag, an attempt of a job with two tags is counted
//! under each (an untagged one under none), so the rows may add up to more
//! than the totals, which count each attempt once.

use std::collections::BTreeMap;

use serde::Serialize;
use uuid::Uuid;

use crate::jobs::Tags;

const DAY_MS: i64 = 86_400_000;

/// The charges of settled attempts sharing a day and an attribution, as
/// the store sums them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpendRecord {
    /// Days since the epoch (UTC) the attempts settled on.
    pub day: i64,
    pub owner: String,
    pub key_id: Option<Uuid>,
    pub team: Option<String>,
    pub tags: Tags,
    pub route: String,
    pub provider: String,
    pub nanos: i64,
    pub tokens: i64,
    pub attempts: i64,
}

/// What a report may be grouped by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Dimension {
    Day,
    Owner,
    Key,
    Team,
    Tag,
    Route,
    Provider,
    Model,
}

impl Dimension {
    pub const ALL: [Dimension; 8] = [
        Dimension::Day,
        Dimension::Owner,
        Dimension::Key,
        Dimension::Team,
        Dimension::Tag,
        Dimension::Route,
        Dimension::Provider,
        Dimension::Model,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Dimension::Day => "day",
            Dimension::Owner => "owner",
            Dimension::Key => "key",
            Dimension::Team => "team",
            Dimension::Tag => "tag",
            Dimension::Route => "route",
            Dimension::Provider => "provider",
            Dimension::Model => "model",
        }
    }

    pub fn parse(name: &str) -> Option<Dimension> {
        Dimension::ALL.into_iter().find(|dimension| dimension.name() == name)
    }
}

/// One row of a report: its value of each dimension grouped by (`None`:
/// the record had none, e.g. a config principal's key), and the sums.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SpendRow {
    pub group: Vec<Option<String>>,
    pub nanos: i64,
    pub tokens: i64,
    pub attempts: i64,
}

/// Sums of a whole report, each attempt counted once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SpendTotals {
    pub nanos: i64,
    pub tokens: i64,
    pub attempts: i64,
}

/// `records` grouped by `dimensions` (in that order), rows sorted by
/// their group; `model_of` names a provider's model.
pub fn group(
    records: &[SpendRecord],
    dimensions: &[Dimension],
    model_of: impl Fn(&str) -> Option<String>,
) -> (Vec<SpendRow>, SpendTotals) {
    let mut rows: BTreeMap<Vec<Option<String>>, SpendTotals> = BTreeMap::new();
    let mut totals = SpendTotals::default();
    for record in records {
        totals.add(record);
        for group in groups_of(record, dimensions, &model_of) {
            rows.entry(group).or_default().add(record);
        }
    }
    let rows = rows
        .into_iter()
        .map(|(group, sums)| SpendRow {
            group,
            nanos: sums.nanos,
            tokens: sums.tokens,
            attempts: sums.attempts,
        })
        .collect();
    (rows, totals)
}

impl SpendTotals {
    fn add(&mut self, record: &SpendRecord) {
        self.nanos = self.nanos.saturating_add(record.nanos);
        self.tokens = self.tokens.saturating_add(record.tokens);
        self.attempts = self.attempts.saturating_add(record.attempts);
    }
}

/// The groups one record counts in: one, or one per tag when grouped by tag.
fn groups_of(
    record: &SpendRecord,
    dimensions: &[Dimension],
    model_of: &impl Fn(&str) -> Option<String>,
) -> Vec<Vec<Option<String>>> {
    let mut groups: Vec<Vec<Option<String>>> = vec![Vec::with_capacity(dimensions.len())];
    for dimension in dimensions {
        let values: Vec<Option<String>> = match dimension {
            Dimension::Tag if record.tags.is_empty() => vec![None],
            Dimension::Tag => record.tags.iter().map(|tag| Some(tag.to_owned())).collect(),
            Dimension::Day => vec![Some(day_name(record.day))],
            Dimension::Owner => vec![Some(record.owner.clone())],
            Dimension::Key => vec![record.key_id.map(|id| id.to_string())],
            Dimension::Team => vec![record.team.clone()],
            Dimension::Route => vec![Some(record.route.clone())],
            Dimension::Provider => vec![Some(record.provider.clone())],
            Dimension::Model => vec![model_of(&record.provider)],
        };
        groups = groups
            .into_iter()
            .flat_map(|group| {
                values.iter().map(move |value| {
                    let mut group = group.clone();
                    group.push(value.clone());
                    group
                })
            })
            .collect();
    }
    groups
}

/// `2026-12-04` for a day since the epoch.
fn day_name(day: i64) -> String {
    chrono::DateTime::from_timestamp_millis(day.saturating_mul(DAY_MS))
        .map(|at| at.format("%Y-%m-%d").to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(tags: &[&str], nanos: i64) -> SpendRecord {
        SpendRecord {
            day: 20_791,
            owner: "alice".into(),
            key_id: None,
            team: Some("support".into()),
            tags: Tags::parse(tags.iter().copied()).unwrap(),
            route: "chat".into(),
            provider: "sim".into(),
            nanos,
            tokens: 10,
            attempts: 1,
        }
    }

    #[test]
    fn grouped_by_tag_an_attempt_counts_under_each_of_its_tags_and_once_in_the_totals() {
        let records = [record(&["bot", "prod"], 100), record(&[], 7), record(&["bot"], 20)];
        let (rows, totals) = group(&records, &[Dimension::Team, Dimension::Tag], |_| None);
        let support = || Some("support".to_owned());
        assert_eq!(
            rows.iter().map(|row| (row.group.clone(), row.nanos)).collect::<Vec<_>>(),
            [
                (vec![support(), None], 7),
                (vec![support(), Some("bot".into())], 120),
                (vec![support(), Some("prod".into())], 100)
            ]
        );
        assert_eq!(totals, SpendTotals { nanos: 127, tokens: 30, attempts: 3 });
    }

    #[test]
    fn days_models_and_keys_read_as_people_write_them() {
        let (rows, _) =
            group(&[record(&[], 1)], &[Dimension::Day, Dimension::Model, Dimension::Key], |provider| {
                Some(format!("model-of-{provider}"))
            });
        assert_eq!(rows[0].group, [Some("2026-12-04".into()), Some("model-of-sim".into()), None]);
    }
}
