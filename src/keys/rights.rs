//! What a key may do, and the rule that no key makes or manages a key that
//! may do more than itself.
//!
//! Rights are the role, the routes (none named: every route), the expiry
//! (none: never) and the team. An admin restricted to some routes is a
//! delegate for those routes: it can make user keys for them, and nothing
//! wider. A team admin makes and manages user keys of its own team only.

use crate::config::Role;

/// The rights of a key, or of the caller managing one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rights<'a> {
    pub role: Role,
    /// `None`: every route.
    pub routes: Option<&'a [String]>,
    /// `None`: the key never expires.
    pub expires_at_ms: Option<i64>,
    /// The key's team.
    pub team: Option<&'a str>,
}

/// Why a caller may not make or manage a key with the rights asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Excess {
    #[error("only an admin key with every route can make or manage an admin or team-admin key")]
    AdminRole,
    #[error("a team admin makes and manages keys of its own team only")]
    OtherTeam,
    #[error("your key is restricted to some routes: the key must name its routes, within yours")]
    EveryRoute,
    #[error("your key may not use the routes {}", .0.iter().map(|r| format!("`{r}`")).collect::<Vec<_>>().join(", "))]
    Routes(Vec<String>),
    #[error("your key expires: the key must expire no later than yours")]
    OutlivesCaller,
}

impl Rights<'_> {
    /// Whether a key with these rights may use `route`.
    pub fn may_use(&self, route: &str) -> bool {
        self.routes.is_none_or(|routes| routes.iter().any(|r| r == route))
    }

    /// Ok when every right of `other` is one of these: the caller holding
    /// these may make, change, rotate or revoke a key holding `other`.
    pub fn covers(&self, other: &Rights<'_>) -> Result<(), Excess> {
        if other.role != Role::User && (self.role != Role::Admin || self.routes.is_some()) {
            return Err(Excess::AdminRole);
        }
        if self.role == Role::TeamAdmin && (self.team.is_none() || other.team != self.team) {
            return Err(Excess::OtherTeam);
        }
        if let Some(mine) = self.routes {
            let theirs = other.routes.ok_or(Excess::EveryRoute)?;
            let beyond: Vec<String> = theirs.iter().filter(|r| !mine.contains(r)).cloned().collect();
            if !beyond.is_empty() {
                return Err(Excess::Routes(beyond));
            }
        }
        if let Some(mine) = self.expires_at_ms
            && other.expires_at_ms.is_none_or(|theirs| theirs > mine)
        {
            return Err(Excess::OutlivesCaller);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rights(role: Role, routes: Option<&[String]>, expires_at_ms: Option<i64>) -> Rights<'_> {
        Rights { role, routes, expires_at_ms, team: None }
    }

    #[test]
    fn no_key_makes_a_wider_one() {
        let chat = vec!["chat".to_owned()];
        let both = vec!["chat".to_owned(), "embed".to_owned()];
        let root = rights(Role::Admin, None, None);
        let delegate = rights(Role::Admin, Some(&chat), None);
        assert_eq!(root.covers(&rights(Role::Admin, None, None)), Ok(()));
        assert_eq!(delegate.covers(&rights(Role::User, Some(&chat), None)), Ok(()));
        assert_eq!(delegate.covers(&rights(Role::Admin, Some(&chat), None)), Err(Excess::AdminRole));
        assert_eq!(delegate.covers(&rights(Role::User, None, None)), Err(Excess::EveryRoute));
        assert_eq!(
            delegate.covers(&rights(Role::User, Some(&both), None)),
            Err(Excess::Routes(vec!["embed".into()]))
        );
        let expiring = rights(Role::Admin, None, Some(100));
        assert_eq!(expiring.covers(&rights(Role::User, None, None)), Err(Excess::OutlivesCaller));
        assert_eq!(expiring.covers(&rights(Role::User, None, Some(101))), Err(Excess::OutlivesCaller));
        assert_eq!(expiring.covers(&rights(Role::User, None, Some(100))), Ok(()));
        assert!(delegate.may_use("chat") && !delegate.may_use("embed") && root.may_use("embed"));
    }

    #[test]
    fn a_team_admin_manages_its_own_teams_user_keys_only() {
        let lead = Rights { team: Some("support"), ..rights(Role::TeamAdmin, None, None) };
        let member = Rights { team: Some("support"), ..rights(Role::User, None, None) };
        assert_eq!(lead.covers(&member), Ok(()));
        assert_eq!(lead.covers(&Rights { team: Some("sales"), ..member.clone() }), Err(Excess::OtherTeam));
        assert_eq!(lead.covers(&Rights { team: None, ..member.clone() }), Err(Excess::OtherTeam));
        assert_eq!(lead.covers(&Rights { role: Role::TeamAdmin, ..member.clone() }), Err(Excess::AdminRole));
        assert_eq!(
            rights(Role::Admin, None, None).covers(&Rights { role: Role::TeamAdmin, ..member }),
            Ok(())
        );
    }
}
