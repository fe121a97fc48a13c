//! `idemgate demo`: the whole product on an in-process Kafka cluster.

#[derive(clap::Args)]
pub struct DemoArgs {
    /// Bank transactions to generate.
    #[arg(long, default_value_t = 1500)]
    pub transactions: u64,
    /// Vehicles sending telemetry.
    #[arg(long, default_value_t = 20)]
    pub vehicles: u64,
    /// Minutes of telemetry per vehicle (one reading a minute).
    #[arg(long, default_value_t = 90)]
    pub minutes: u64,
}

impl DemoArgs {
    pub fn run(self) -> anyhow::Result<()> {
        let report = super::runtime()?.block_on(crate::demo::run(
            self.transactions,
            self.vehicles,
            self.minutes,
            |intro| println!("{intro}\n"),
        ))?;
        println!("{}", report.table());
        if !report.ok() {
            anyhow::bail!("the demo's check failed");
        }
        println!("{}", crate::demo::NEXT);
        Ok(())
    }
}
