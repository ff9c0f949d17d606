pub mod entries;
pub mod external;
pub mod moto;
pub mod proxy;
pub mod roles;
