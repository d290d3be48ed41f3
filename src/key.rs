//! The key of a pod: what the work queue carries.
//!
//! It has a module of its own because everyone speaks it: the informer makes
//! keys, the queue holds them, the worker and the probes name them. Giving it
//! a home of its own keeps those modules from importing each other for it.

use std::fmt;
use std::sync::Arc;

use crate::pod::Pod;

/// What the queue carries: a pod's namespace and name, printed `namespace/name`
/// like client-go's `MetaNamespaceKeyFunc`. (kube's `ObjectRef` prints
/// `Pod.v1./name.namespace`, which is not what people grep for.)
///
/// Its text is shared (`Arc<str>`): the store, the queue and the worker each
/// hold a key per pod, and a clone of it is two counts, not two copies.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    pub namespace: Arc<str>,
    pub name: Arc<str>,
}

impl Key {
    /// The pod's key, sharing the pod's own text.
    pub fn of(pod: &Pod) -> Key {
        let meta = &pod.metadata;
        Key {
            namespace: meta.namespace.clone().unwrap_or_else(|| Arc::from("")),
            name: meta.name.clone().unwrap_or_else(|| Arc::from("")),
        }
    }
}

/// Printed cleaned (text.rs): a real name is printed as it is, but one
/// from a broken server or a proxy can never break or disguise a line.
impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::text::{NAME_CHARS, cleaned};
        write!(f, "{}/{}", cleaned(&self.namespace, NAME_CHARS), cleaned(&self.name, NAME_CHARS))
    }
}
