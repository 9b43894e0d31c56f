//! A `Refusal` as the answer the transport sends: its status, its JSON body and
//! `Content-Type: application/json`, as dockerd sends its errors.

use http::{header, HeaderValue, Response};
use sockproxy_policy::Refusal;

use crate::upstream::{full, Body};

/// A refusal turned into the answer hyper sends; implemented here because `Refusal` is the
/// policy crate's and the body type is the transport's.
pub trait IntoResponse {
    fn into_response(self) -> Response<Body>;
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response<Body> {
        let mut resp = Response::new(full(self.body()));
        *resp.status_mut() = self.status();
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        resp
    }
}
