//! Label sets more than one program's metric families use (one label each, its value one of a
//! fixed set of words, never a client's string).

use prometheus_client::encoding::EncodeLabelSet;

/// `kind`: what sort of failure, refusal or object.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: &'static str,
}

/// `result`: how an operation ended.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: &'static str,
}
