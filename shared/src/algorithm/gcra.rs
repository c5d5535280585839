//! TODO: gcra.

use super::{Algo, Check, Usage};
use crate::policy::Limit;
use crate::time::Nanos;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct State {}

pub struct Gcra;

impl Algo for Gcra {
    type State = State;
    fn advance(_limit: &Limit, _state: &mut State, _now: Nanos) {}
    fn check(_limit: &Limit, _state: &State, _now: Nanos, _cost: u64) -> Check {
        todo!()
    }
    fn consume(_limit: &Limit, _state: &mut State, _now: Nanos, _cost: u64) {}
    fn usage(_limit: &Limit, _state: &State, _now: Nanos) -> Usage {
        todo!()
    }
}
